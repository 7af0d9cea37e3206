//! Workload generation and measurement behind `loadgen`.
