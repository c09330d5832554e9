"""Error answers of the daemon's own routes: bad input is a 4xx that says what to fix, and no answer carries text
the request controls (FastAPI's own 422 echoes the offending input back)."""

from __future__ import annotations

import re

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

# Parts of an error location that name the API's own fields (or list positions); anything else came from the request.
_OWN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")


def _location(loc: tuple) -> str:
    return ".".join(str(part) if isinstance(part, int) or _OWN_NAME.fullmatch(str(part)) else "?" for part in loc)


async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
    # pydantic's messages are fixed words ("Input should be a valid integer"); its `input` and `ctx` are the request's.
    problems = [f"{_location(tuple(error.get('loc', ())))}: {error.get('msg', 'invalid')}" for error in exc.errors()]
    return JSONResponse({"detail": "invalid request: " + "; ".join(problems[:10])}, status_code=422)


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(RequestValidationError, _invalid)
