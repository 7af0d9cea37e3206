"""The pressure suite (kvrouter issue 10): cases, run, targets, report and charts."""
