//! One Prometheus registry and typed metric handles (`kvrouter_*`).
