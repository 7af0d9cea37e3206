//! Block identity: page splitting, xxh3-64 content hashes and chained sequence hashes (Dynamo-compatible).
