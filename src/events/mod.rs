//! KV-event ingestion: wire decoders (SGLang msgpack, Dynamo RouterEvent), ZMQ and NATS sources, per-(worker, rank) sequence cursors, replay and relay.
