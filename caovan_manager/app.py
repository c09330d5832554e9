"""The daemon's FastAPI application: routers, OpenAPI docs at /docs, the dashboard at / when web/ exists."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles
from starlette.routing import Mount

import caovan_kernels
from caovan_manager.api import control, doctor, draft_vocab, logs, metrics, models, plugins, status
from caovan_manager.api.door import FrontDoor
from caovan_manager.api.errors import install_error_handlers
from caovan_manager.api.schemas import DOOR
from caovan_manager.config import Settings
from caovan_manager.daemon import Daemon
from caovan_manager.engine.launch import EngineTarget


def default_web_dir() -> Path:
    """The dashboard shipped with this package: in a checkout, caovan_manager/web links to the project's web/."""
    return (Path(__file__).resolve().parent / "web").resolve()


def create_app(settings: Settings, target: EngineTarget | None = None, autostart: bool = True,
               daemon: Daemon | None = None) -> FastAPI:
    daemon = daemon or Daemon(settings, target, autostart)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await daemon.start()
        try:
            yield
        finally:
            await daemon.shutdown()

    app = FastAPI(title="Caovan daemon", version=caovan_kernels.__version__, lifespan=lifespan, responses=DOOR,
                  description="Supervises the vLLM engine, proxies the OpenAI API, swaps plugin versions safely. "
                              "`/v1/*` is the engine's OpenAI-compatible API, relayed (with an inference key where "
                              "security.inference_keys is set); see the engine's own /docs for its endpoints.")
    app.state.daemon = daemon
    app.state.doctor_cache = {"lock": asyncio.Lock(), "at": 0.0, "report": None}
    for module in (status, control, models, logs, plugins, draft_vocab, metrics, doctor):
        app.include_router(module.router)
    # First in the route list: it carries the traffic, and the router tries routes in order.
    app.router.routes.insert(0, Mount("/v1", app=daemon.relay, name="openai"))
    # Outermost, before any routing: request targets with two readings and cross-site calls that act end here.
    app.add_middleware(FrontDoor, trusted_origins=lambda: daemon.settings.security.trusted_origins,
                       # the name the daemon was told to listen on is one it answers to (its CLI calls it so)
                       allowed_hosts=lambda: [*daemon.settings.security.allowed_hosts, daemon.settings.host])
    install_error_handlers(app)
    web = settings.web_dir or default_web_dir()
    if (web / "index.html").is_file():
        app.mount("/", StaticFiles(directory=web, html=True), name="web")
    return app
