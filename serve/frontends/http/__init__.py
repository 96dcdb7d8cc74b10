"""serve.frontends.http: the REST listeners (FastAPI apps per listener, routers per resource, token auth)."""

from serve.frontends.http.app import create_inference_app, create_management_app, create_metrics_app
from serve.frontends.http.auth import TokenAuth

__all__ = ["TokenAuth", "create_inference_app", "create_management_app", "create_metrics_app"]
