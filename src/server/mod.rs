//! The HTTP surface: hyper service, route table, admin endpoints, error shapes and the metrics endpoint.
