"""The fields of sgl-router 0.3.2's ``RouterArgs``, declared once.

Each field gives its name and default (the dataclass default of
``sglang_router/router_args.py`` in ``sglang-router==0.3.2``), how ``add_cli_args`` registers
it (flag stem, type, nargs, choices, argparse default when it differs from the dataclass
default, environment fallback) and what the launcher does with it: ``PASS`` emits the
sgl-router flag of the same name on the ``router`` command line (the router uses it, accepts
and ignores it with a warning, or refuses it with an error that names it); ``DROP`` leaves it
off with a warning when it is set (kvrouter has no equivalent and dropping it changes nothing
that serves requests). See docs/migration.md.
"""

from typing import Any, Callable, NamedTuple, Optional, Sequence

PASS = "pass"
DROP = "drop"

_SAME = object()  # argparse default = dataclass default


class Field(NamedTuple):
    name: str
    default: Any
    to: str = PASS
    type: Optional[Callable[[str], Any]] = str
    nargs: Optional[str] = None
    choices: Optional[Sequence[str]] = None
    switch: bool = False  # argparse store_true
    append: bool = False  # argparse action="append"
    flag: Optional[str] = None  # CLI stem when it is not the field name with dashes
    prefixed: bool = True  # takes the "router-" prefix with use_router_prefix
    cli_default: Any = _SAME
    env: Optional[str] = None  # add_cli_args reads its default from this variable
    cli: bool = True  # add_cli_args registers a flag for it

    @property
    def stem(self) -> str:
        return self.flag or self.name.replace("_", "-")

    @property
    def dest(self) -> str:
        """Attribute of the argparse namespace (without the prefix)."""
        return self.stem.replace("-", "_")

    def argparse_default(self) -> Any:
        import os

        default = self.default if self.cli_default is _SAME else self.cli_default
        if self.env and os.getenv(self.env) is not None:
            raw = os.environ[self.env]
            return self.type(raw) if self.type else raw
        return default


_POLICIES = ["random", "round_robin", "cache_aware", "power_of_two", "manual"]


def _f(name: str, default: Any, **kw: Any) -> Field:
    return Field(name, default, **kw)


FIELDS = (
    # Workers, routing policy
    _f("worker_urls", [], nargs="*", prefixed=False, cli_default=[]),
    _f("host", "0.0.0.0", prefixed=False),
    _f("port", 30000, type=int, prefixed=False),
    _f("mini_lb", False, switch=True, type=None),
    _f("pd_disaggregation", False, switch=True, type=None),
    _f("prefill_urls", [], to=DROP, flag="prefill", nargs="+", append=True, cli_default=None),
    _f("decode_urls", [], to=DROP, flag="decode", nargs=1, append=True, cli_default=None),
    _f("policy", "cache_aware", choices=_POLICIES),
    _f("prefill_policy", None, to=DROP, choices=_POLICIES + ["bucket"]),
    _f("decode_policy", None, to=DROP, choices=_POLICIES),
    _f("worker_startup_timeout_secs", 1800, type=int),
    _f("worker_startup_check_interval", 30, type=int),
    _f("cache_threshold", 0.3, type=float),
    _f("balance_abs_threshold", 64, type=int),
    _f("balance_rel_threshold", 1.5, type=float),
    _f("eviction_interval_secs", 60, type=int),
    _f("max_tree_size", 2**26, type=int),
    _f("max_idle_secs", 4 * 3600, type=int),
    _f("assignment_mode", "random", choices=["random", "min_load", "min_group"]),
    _f("max_payload_size", 512 * 1024 * 1024, type=int),
    _f("bucket_adjust_interval_secs", 5, type=int),
    _f("dp_aware", False, switch=True, type=None),
    _f("enable_igw", False, switch=True, type=None),
    _f("api_key", None),
    _f("log_dir", None),
    _f("log_level", None, choices=["debug", "info", "warn", "error"], cli_default="info"),
    # Kubernetes service discovery
    _f("service_discovery", False, switch=True, type=None),
    _f("selector", {}, to=DROP, nargs="+", cli_default={}),
    _f("service_discovery_port", 80, to=DROP, type=int),
    _f("service_discovery_namespace", None, to=DROP),
    _f("prefill_selector", {}, to=DROP, nargs="+", cli_default={}),
    _f("decode_selector", {}, to=DROP, nargs="+", cli_default={}),
    _f("bootstrap_port_annotation", "sglang.ai/bootstrap-port", to=DROP, cli=False),
    # Prometheus, requests, admission
    _f("prometheus_port", None, type=int, cli_default=29000),
    _f("prometheus_host", None, cli_default="0.0.0.0"),
    _f("prometheus_duration_buckets", None, type=float, nargs="+"),
    _f("request_id_headers", None, nargs="*"),
    _f("request_timeout_secs", 1800, type=int),
    _f("shutdown_grace_period_secs", 180, type=int),
    _f("max_concurrent_requests", -1, type=int),
    _f("queue_size", 100, type=int),
    _f("queue_timeout_secs", 60, type=int),
    _f("rate_limit_tokens_per_second", None, type=int),
    _f("cors_allowed_origins", [], nargs="*", cli_default=[]),
    # Retries, circuit breaker, health checks
    _f("retry_max_retries", 5, type=int),
    _f("retry_initial_backoff_ms", 50, type=int),
    _f("retry_max_backoff_ms", 30_000, type=int),
    _f("retry_backoff_multiplier", 1.5, type=float),
    _f("retry_jitter_factor", 0.2, type=float),
    _f("disable_retries", False, switch=True, type=None),
    _f("health_failure_threshold", 3, type=int),
    _f("health_success_threshold", 2, type=int),
    _f("health_check_timeout_secs", 5, type=int),
    _f("health_check_interval_secs", 60, type=int),
    _f("health_check_endpoint", "/health"),
    _f("disable_health_check", False, switch=True, type=None),
    _f("cb_failure_threshold", 10, type=int),
    _f("cb_success_threshold", 3, type=int),
    _f("cb_timeout_duration_secs", 60, type=int),
    _f("cb_window_duration_secs", 120, type=int),
    _f("disable_circuit_breaker", False, switch=True, type=None),
    # Tokenizer, parsers, backends
    _f("model_path", None),
    _f("tokenizer_path", None),
    _f("chat_template", None),
    _f("tokenizer_cache_enable_l0", False, to=DROP, switch=True, type=None),
    _f("tokenizer_cache_l0_max_entries", 10000, to=DROP, type=int),
    _f("tokenizer_cache_enable_l1", False, to=DROP, switch=True, type=None),
    _f("tokenizer_cache_l1_max_memory", 50 * 1024 * 1024, to=DROP, type=int),
    _f("reasoning_parser", None),
    _f("tool_call_parser", None),
    _f("mcp_config_path", None, to=DROP),
    _f("backend", "sglang", choices=["sglang", "openai"]),
    _f("history_backend", "memory", choices=["memory", "none", "oracle", "postgres", "redis"]),
    _f("oracle_wallet_path", None, to=DROP, env="ATP_WALLET_PATH"),
    _f("oracle_tns_alias", None, to=DROP, env="ATP_TNS_ALIAS"),
    _f("oracle_connect_descriptor", None, to=DROP, env="ATP_DSN"),
    _f("oracle_username", None, to=DROP, env="ATP_USER"),
    _f("oracle_password", None, to=DROP, env="ATP_PASSWORD"),
    _f("oracle_pool_min", 1, to=DROP, type=int, env="ATP_POOL_MIN"),
    _f("oracle_pool_max", 16, to=DROP, type=int, env="ATP_POOL_MAX"),
    _f("oracle_pool_timeout_secs", 30, to=DROP, type=int, env="ATP_POOL_TIMEOUT_SECS"),
    _f("postgres_db_url", None, to=DROP, env="POSTGRES_DB_URL"),
    _f("postgres_pool_max", 16, to=DROP, type=int, env="POSTGRES_POOL_MAX"),
    _f("redis_url", None, to=DROP, env="REDIS_URL"),
    _f("redis_pool_max", 16, to=DROP, type=int, env="REDIS_POOL_MAX"),
    _f("redis_retention_days", 30, to=DROP, type=int, env="REDIS_RETENTION_DAYS"),
    # TLS (workers: mTLS client; router: server certificate)
    _f("client_cert_path", None),
    _f("client_key_path", None),
    _f("ca_cert_paths", [], nargs="*", cli_default=[]),
    _f("server_cert_path", None, flag="tls-cert-path"),
    _f("server_key_path", None, flag="tls-key-path"),
    # Tracing, control-plane authentication
    _f("enable_trace", False, switch=True, type=None),
    _f("otlp_traces_endpoint", "localhost:4317"),
    _f("control_plane_api_keys", [], nargs="*", cli_default=[]),
    _f("control_plane_audit_enabled", False, to=DROP, switch=True, type=None),
    _f("jwt_issuer", None),
    _f("jwt_audience", None, to=DROP),
    _f("jwt_jwks_uri", None, to=DROP),
    _f("jwt_role_mapping", {}, to=DROP, nargs="*", cli_default=[]),
)

BY_NAME = {f.name: f for f in FIELDS}
