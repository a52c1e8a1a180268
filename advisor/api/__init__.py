"""The HTTP API front end: the FastAPI app, the jobs it runs, solve worker processes, the report store and its settings."""
