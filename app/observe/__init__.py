"""What an operator sees: JSON logs and the one redaction of whatever is logged (`logs.py`),
Prometheus metrics (`metrics.py`), OpenTelemetry traces (`telemetry.py`)."""
