# syntax=docker/dockerfile:1
# kvrouter `router` image: `docker build -t kvrouter .` (see docs/deployment.md).
# Only the router is built; the simulator (crates/sim) is a dev-dependency and is not shipped.

FROM rust:1-bookworm AS builder
# protoc: the image has etcd discovery (cargo feature `etcd`), whose etcd-client generates its
# gRPC code at build time.
RUN apt-get update \
    && apt-get install -y --no-install-recommends protobuf-compiler \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY crates ./crates
# BuildKit cache mounts keep the registry and target/ between builds (dependencies are
# compiled once); the binary is copied out of the cached target/ before the mount goes away.
# The shipped binary is stripped (~18 MB instead of ~130 MB); its debug info stays in the
# builder stage as /out/router.debug, linked by a GNU debuglink (for symbolized backtraces:
# `docker build --target builder` and copy it out).
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p kvrouter --features etcd --bin router \
    && install -D -m 0755 target/release/router /out/router \
    && objcopy --only-keep-debug /out/router /out/router.debug \
    && objcopy --strip-all --add-gnu-debuglink=/out/router.debug /out/router

FROM debian:bookworm-slim AS runtime
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 kvrouter \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --shell /usr/sbin/nologin kvrouter
COPY --from=builder /out/router /usr/local/bin/router
USER 10001:10001
# The router binds 127.0.0.1 by default; in a container it must listen on every interface.
# Every flag is also a KVROUTER_* variable; flags given to `docker run` / args still win.
ENV KVROUTER_HOST=0.0.0.0
# Default port of the router (`--port`, KVROUTER_PORT).
EXPOSE 30000
ENTRYPOINT ["/usr/local/bin/router"]
