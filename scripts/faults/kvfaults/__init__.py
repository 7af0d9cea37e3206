"""The issue-12 fault suite: real processes on loopback, one fault per case, client-side counts."""
