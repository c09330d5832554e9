"""The daemon's FastAPI application and its routers."""
