"""HTTP API (FastAPI), versioned under /v1: catalog look-ups, evaluate, optimize, compare and stored HTML reports.

Run it with `advisor serve` or `uvicorn advisor.api.app:app`. Solves run in a bounded pool of settings.workers worker
processes (advisor/api/workers.py; settings.solve_in = "thread" runs them in threads of the server instead); a request
that cannot get a slot within settings.queue_wait_s is answered 503 with Retry-After, so the event loop (and
/healthz) always stays responsive.
"""

from __future__ import annotations

import hmac
import logging
import math
import re
import time
import warnings
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Literal, TypeVar
from collections.abc import Awaitable, Callable

import anyio
from fastapi import APIRouter, FastAPI, HTTPException, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, PlainTextResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from advisor import __version__
from advisor.api import jobs as api_jobs
from advisor.api.problems import (PROBLEM_MEDIA_TYPE, BodyProblem, Problem, check_json_body, is_json_media_type,
                                  loc_text, problem, problem_bytes)
from advisor.api.settings import ApiSettings
from advisor.api.store import ReportStore
from advisor.api.workers import WorkerDied, WorkerProcesses
from advisor.cancel import CancelToken, Cancelled, cancellable
from advisor.catalog import builtin_catalog, catalog_refs_only, load_catalog
from advisor.errors import InputError
from advisor.optimizer.compare import ChipVsRack, LayoutComparison
from advisor.optimizer.optimize import OptimizeResult
from advisor.requests import ReportRequest
from advisor.requests import ChipVsRackRequest, CompareRequest, EvaluateRequest, ExportRequest, OptimizeRequest
from models.catalog import Catalog, UnknownId
from models.hardware import Chassis, CpuSku, GpuSku, Rack, RackSystem, Switch
from models.pipeline import Evaluation
from models.workload import ServedModel, Workload

log = logging.getLogger("advisor.api.app")
T = TypeVar("T")
API_KEY_HEADER = "X-API-Key"
OPEN_PATHS = ("/healthz",)
"""Paths that never need the API key."""
DOCS_STATIC = "/docs-static"
"""Where /docs loads Swagger UI's script and style from: files of the fastapi-offline package, never a CDN."""
CATALOG_KINDS: dict[str, type[BaseModel]] = {
    "cpus": CpuSku, "gpus": GpuSku, "chassis": Chassis, "racks": Rack, "workloads": Workload,
    "served_models": ServedModel, "systems": RackSystem, "switches": Switch,
}


# ------------------------------------------------------------------------------------------------ request / response

class ReportCreated(BaseModel):
    id: str
    url: str
    """The HTML report: relative to the API's root (`/v1/reports/ID`), or absolute from the server's
    public_base_url setting."""
    json_url: str
    """The report's figures as JSON (relative or absolute as `url`)."""
    created: str
    """UTC, ISO 8601."""


class StoredReportOut(BaseModel):
    """A stored report: the request it answered and its figures."""

    id: str
    created: str
    """UTC, ISO 8601."""
    request: ReportRequest
    """The request as the server ran it (time limits after the server's caps)."""
    result: dict[str, Any]
    """The report's figures: the same data the HTML page shows (recommendation, layouts, sweeps, operations)."""


class ReportSummary(BaseModel):
    id: str
    created: str
    """UTC, ISO 8601."""
    url: str
    json_url: str


class ReportPage(BaseModel):
    """One page of stored reports, newest first."""

    items: list[ReportSummary]
    total: int
    """Stored reports in all."""
    limit: int
    offset: int
    next_offset: int | None
    """Offset of the next page; null on the last page."""


class Health(BaseModel):
    status: str
    version: str
    workers: int
    busy: int
    """Solves running now."""
    waiting: int
    """Requests waiting for a solve slot."""
    abandoned: int = 0
    """Requests since start whose client left while they waited for a slot (never started)."""
    cancelled: int = 0
    """Requests since start whose client left while their solve ran (stopped early)."""
    solve_in: Literal["process", "thread"] = "process"
    """Where solves run: worker processes (the default) or threads of the server."""
    workers_replaced: int = 0
    """Worker processes since start that died during a job and were replaced (that job answered 500)."""


ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": Problem, "description": "The body is not JSON, nests too deeply, or Content-Length is not a "
                                           "number."},
    401: {"model": Problem, "description": "API key missing."}, 403: {"model": Problem,
                                                                     "description": "API key not accepted."},
    408: {"model": Problem, "description": "The body did not arrive within body_read_timeout_s (the connection is "
                                           "closed)."},
    413: {"model": Problem, "description": "Body larger than max_body_bytes."},
    415: {"model": Problem, "description": "A body that is not `application/json`."},
    422: {"model": Problem, "description": "Invalid input: each of `errors` names a field (`loc`) and what is "
                                           "wrong with it; non-finite, out-of-range numbers and repeated keys "
                                           "included."},
    500: {"model": Problem, "description": "Internal error (no details; the server logs them)."},
    503: {"model": Problem, "description": "No solve slot within queue_wait_s; see Retry-After.",
          "headers": {"Retry-After": {"schema": {"type": "integer"}, "description": "Seconds to wait."}}}}
"""Error answers every /v1 route may give, all RFC 9457 problem documents."""
BODY_METHODS = ("POST",)
"""Methods whose body the API reads (the only one its routes take); others are answered by the routes (405)."""
DISCONNECT_POLL_S = 0.05
"""How often a request waiting for a solve slot checks whether its client is still there."""


# ------------------------------------------------------------------------------------------------------ worker pool

class Busy(Exception):
    def __init__(self, retry_after: int):
        self.retry_after = retry_after


class ClientGone(Exception):
    """The client disconnected before its answer: work not started is never started, work running is cancelled."""


class SolvePool:
    """At most `workers` solves at once, each in a worker process (`processes`, advisor/api/workers.py) or, without
    one, a worker thread. Waiting for a slot is bounded in time; a request whose client disconnects while it waits
    gives up its place without starting its solve, and one whose client disconnects while its solve runs cancels it
    (`advisor.cancel`; in a process, through the worker's pipe). Every solve runs under `catalog_refs_only`:
    strings in a request are catalog ids, never files to read. A job is `fn(catalog, *args)` with `fn` a
    module-level function (advisor/api/jobs.py), so that it can cross to a process."""

    def __init__(self, workers: int, queue_wait_s: float, catalog: Callable[[], Catalog],
                 processes: WorkerProcesses | None = None):
        self.workers, self.queue_wait_s = workers, queue_wait_s
        self.catalog, self.processes = catalog, processes
        self.slots = anyio.Semaphore(workers)
        self.threads = anyio.CapacityLimiter(workers)
        self.busy = 0
        self.waiting = 0
        self.mean_s = 1.0
        """Running mean of solve time, for Retry-After."""
        self.abandoned = 0
        """Requests whose client left while they waited for a slot (their solves never started)."""
        self.cancelled = 0
        """Requests whose client left while their solve ran (stopped at its next step, nothing stored)."""
        self.jobs = 0

    def retry_after(self) -> int:
        return max(1, math.ceil(self.mean_s * max(1, self.waiting) / self.workers))

    async def _acquire(self, disconnected: Callable[[], Awaitable[bool]] | None) -> bool:
        """Wait for a slot; False when the client disconnected first (no slot is then held)."""
        if disconnected is None:
            await self.slots.acquire()
            return True
        gone = False
        async with anyio.create_task_group() as tg:
            async def watch() -> None:
                nonlocal gone
                while not await disconnected():
                    await anyio.sleep(DISCONNECT_POLL_S)
                gone = True
                tg.cancel_scope.cancel()

            tg.start_soon(watch)
            await self.slots.acquire()  # cancelled by watch(): anyio gives back a slot granted in the same instant
            tg.cancel_scope.cancel()
        return not gone

    def _in_thread(self, fn: Callable[..., T], args: tuple) -> tuple[Callable[[], T], Callable[[], None]]:
        token = CancelToken()
        cat = self.catalog()

        def confined() -> T:
            with catalog_refs_only(), cancellable(token):
                return fn(cat, *args)

        return confined, token.cancel

    async def run(self, fn: Callable[..., T], *args: Any,
                  disconnected: Callable[[], Awaitable[bool]] | None = None) -> T:
        self.waiting += 1
        got = False
        try:
            with anyio.move_on_after(self.queue_wait_s) as scope:
                got = await self._acquire(disconnected)
        finally:
            self.waiting -= 1
        if scope.cancelled_caught:
            raise Busy(self.retry_after())
        if not got:
            self.abandoned += 1
            raise ClientGone()
        self.busy += 1
        self.jobs += 1
        t0 = time.perf_counter()
        worker = [self.processes.take()] if self.processes is not None else None
        if worker is not None:
            job_id = self.jobs

            def work():
                try:
                    ok, value = worker[0].call(job_id, fn, args)
                except WorkerDied as e:
                    if e.started:
                        raise
                    # it died while idle: the job never ran, so it runs on the replacement
                    worker[0] = self.processes.replace(worker[0])
                    ok, value = worker[0].call(job_id, fn, args)
                if not ok:
                    raise value
                return value

            def cancel() -> None:
                worker[0].cancel(job_id)
        else:
            work, cancel = self._in_thread(fn, args)
        outcome: dict[str, Any] = {}
        try:
            async with anyio.create_task_group() as tg:
                if disconnected is not None:
                    async def watch() -> None:
                        while not await disconnected():
                            await anyio.sleep(DISCONNECT_POLL_S)
                        cancel()  # the solve stops at its next step; its answer is waited for below

                    tg.start_soon(watch)
                try:  # outcomes leave the task group as values, so that errors are not wrapped in groups
                    outcome["value"] = await anyio.to_thread.run_sync(work, limiter=self.threads)
                except BaseException as e:  # noqa: BLE001 - re-raised below
                    outcome["error"] = e
                tg.cancel_scope.cancel()
        finally:
            if worker is not None:
                if isinstance(outcome.get("error"), WorkerDied) or not worker[0].alive():
                    try:
                        worker[0] = await anyio.to_thread.run_sync(self.processes.replace, worker[0])
                    except Exception:  # noqa: BLE001 - keep the slot; the next job tries again
                        log.exception("could not start a replacement solve worker")
                self.processes.give(worker[0])
            self.busy -= 1
            self.mean_s = 0.8 * self.mean_s + 0.2 * (time.perf_counter() - t0)
            self.slots.release()
        if "error" in outcome:
            if isinstance(outcome["error"], Cancelled):
                self.cancelled += 1
                raise ClientGone()
            raise outcome["error"]
        return outcome["value"]


# ------------------------------------------------------------------------------------------------------ middleware

def _problem_message(p: Problem, headers: dict[str, str] | None = None) -> tuple[int, bytes, list]:
    body = problem_bytes(p)
    hs = [(b"content-type", PROBLEM_MEDIA_TYPE.encode()), (b"content-length", str(len(body)).encode())]
    hs += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    return p.status, body, hs


def problem_response(p: Problem, headers: dict[str, str] | None = None) -> Response:
    return Response(problem_bytes(p), status_code=p.status, media_type=PROBLEM_MEDIA_TYPE, headers=headers)


CLOSE = {"Connection": "close"}


class GuardMiddleware:
    """Everything a request passes before the application sees it, each refusal a problem document: the API key
    (all paths but /healthz); the body's size (Content-Length and the streamed body), the time it takes to arrive,
    its media type (JSON) and its content (check_json_body: syntax, depth, repeated keys, non-finite and
    out-of-range numbers). The body is buffered (it is at most max_body_bytes).

    Also the last resort for errors: an exception from the application before its answer started is answered 500
    with a problem document and not re-raised, so the server keeps the connection (keep-alive) usable."""

    def __init__(self, app, settings: ApiSettings, json_paths: set[str]):
        self.app, self.settings = app, settings
        self.json_paths = json_paths
        """Paths whose POST takes a JSON body (filled by create_app once its routes exist); other paths are left
        to the router (404, 405)."""

    async def _send(self, send, status: int, body: bytes, headers: list) -> None:
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = False

        async def tracked_send(msg):
            nonlocal started
            if msg["type"] == "http.response.start":
                started = True
            await send(msg)

        try:
            return await self._guarded(scope, receive, tracked_send)
        except Exception:
            if started:
                raise
            log.exception("unhandled error on %s %s", scope.get("method"), scope.get("path"))
            return await self._send(send, *_problem_message(problem(500, "internal", "internal error")))

    async def _guarded(self, scope, receive, send):
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        key = self.settings.api_key
        if key is not None and scope["path"] not in OPEN_PATHS:
            given = headers.get(API_KEY_HEADER.lower())
            if not given:
                return await self._send(send, *_problem_message(
                    problem(401, "unauthorized", f"missing API key (header {API_KEY_HEADER})",
                            [(["header", API_KEY_HEADER], "missing")]), {"WWW-Authenticate": API_KEY_HEADER}))
            if not hmac.compare_digest(given.encode(), key.get_secret_value().encode()):
                return await self._send(send, *_problem_message(
                    problem(403, "forbidden", "invalid API key", [(["header", API_KEY_HEADER], "not accepted")])))
        limit = self.settings.max_body_bytes
        too_big = problem(413, "body-too-large", f"request body larger than {limit:,} bytes",
                          [(["body"], f"larger than {limit:,} bytes")])
        cl = headers.get("content-length")
        if cl is not None:
            try:
                if int(cl) > limit:
                    return await self._send(send, *_problem_message(too_big, CLOSE))
            except ValueError:
                return await self._send(send, *_problem_message(
                    problem(400, "http", "invalid Content-Length", [(["header", "content-length"], "not a number")]),
                    CLOSE))
        if scope["method"] not in BODY_METHODS and cl is None \
                and "chunked" not in headers.get("transfer-encoding", ""):
            return await self.app(scope, receive, send)
        chunks, size = [], 0
        with anyio.move_on_after(self.settings.body_read_timeout_s) as reading:
            while True:
                msg = await receive()
                if msg["type"] == "http.disconnect":
                    return
                chunk = msg.get("body", b"")
                size += len(chunk)
                if size > limit:
                    return await self._send(send, *_problem_message(too_big, CLOSE))
                chunks.append(chunk)
                if not msg.get("more_body", False):
                    break
        if reading.cancelled_caught:
            t = self.settings.body_read_timeout_s
            return await self._send(send, *_problem_message(
                problem(408, "body-timeout", f"request body not complete within {t:g} s",
                        [(["body"], f"not complete within {t:g} s")]), CLOSE))
        body = b"".join(chunks)
        if scope["method"] in BODY_METHODS and scope["path"] in self.json_paths:
            if not is_json_media_type(headers.get("content-type")):
                return await self._send(send, *_problem_message(problem(
                    415, "unsupported-media-type", "the request body must be JSON (Content-Type: application/json)",
                    [(["header", "content-type"], "not application/json")])))
            if body.strip():
                try:
                    check_json_body(body, self.settings.max_json_depth)
                except BodyProblem as e:
                    return await self._send(send, *_problem_message(e.problem))
        sent = False

        async def replay():
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        return await self.app(scope, replay, send)


# ------------------------------------------------------------------------------------------------------------- app

class AppState:
    """What the routes share: settings, the catalog (loaded once), and the solve pool and report store that the
    lifespan opens."""

    def __init__(self, settings: ApiSettings, catalog: Catalog | None):
        self.settings = settings
        self._catalog = catalog
        self._pool: SolvePool | None = None
        self._store: ReportStore | None = None

    def catalog(self) -> Catalog:
        if self._catalog is None:
            s = self.settings
            self._catalog = load_catalog(s.catalog) if s.catalog else builtin_catalog()
        return self._catalog

    @property
    def pool(self) -> SolvePool:
        assert self._pool is not None, "the app's lifespan has not started"
        return self._pool

    @property
    def store(self) -> ReportStore:
        assert self._store is not None, "the app's lifespan has not started"
        return self._store

    def cap(self, t: float | None) -> float:
        """A request's time limit, capped by the server's."""
        return min(t, self.settings.time_limit_cap_s) if t else self.settings.time_limit_cap_s

    @asynccontextmanager
    async def lifespan(self, app: FastAPI):
        s = self.settings
        given = self._catalog
        self.catalog()
        processes = None
        if s.solve_in == "process":
            processes = WorkerProcesses(s.workers, s.catalog, given, s.worker_nice, s.worker_start_timeout_s)
            await anyio.to_thread.run_sync(processes.start)
        self._pool = SolvePool(s.workers, s.queue_wait_s, self.catalog, processes)
        self._store = ReportStore(s.database, s.report_max_count, s.report_max_age_days)
        try:
            yield
        finally:
            if processes is not None:
                await anyio.to_thread.run_sync(processes.stop)


def create_app(settings: ApiSettings | None = None, catalog: Catalog | None = None) -> FastAPI:
    """The HTTP API: guard middleware, problem-document errors, health and docs, then the /v1 routes (catalog,
    solve, reports), and an OpenAPI document that describes the key and the error shape."""
    st = AppState(settings or ApiSettings(), catalog)
    app = FastAPI(
        title="rack-advisor", version=__version__, lifespan=st.lifespan, docs_url=None, redoc_url=None,
        description="Fill data-center racks for the most agentic AI tasks per hour: catalog, evaluate, optimize, "
                    "compare layouts A/B/hybrid, and self-contained HTML recommendation reports.",
    )
    json_paths: set[str] = set()
    app.add_middleware(GuardMiddleware, settings=st.settings, json_paths=json_paths)
    v1 = APIRouter(prefix="/v1", responses=ERRORS)
    add_error_handlers(app, v1)
    add_health_and_docs(app, st)
    add_catalog_routes(v1, st)
    add_solve_routes(v1, st)
    add_report_routes(v1, st)
    app.include_router(v1)
    json_paths.update(r.path for r in v1.routes if "POST" in getattr(r, "methods", ()))
    document_openapi(app, st.settings)
    return app


def add_error_handlers(app: FastAPI, v1: APIRouter) -> None:
    """Errors in one shape (RFC 9457 problem details), never stack traces, never raw input values. Unhandled
    exceptions are answered 500 by GuardMiddleware (a problem document; keep-alive stays usable)."""

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError):
        if any(e.get("type") == "json_invalid" for e in exc.errors()):
            # a body the edge check let through (e.g. a JSON media type it does not list) that FastAPI cannot
            # decode: the same 400 as the edge gives, not a 422 naming a character offset as if it were a field
            return problem_response(problem(400, "invalid-json", "body is not valid JSON", [(["body"], "not JSON")]))
        errs = [(list(e.get("loc", ("body",))), "unknown field" if e.get("type") == "extra_forbidden" else
                 str(e.get("msg", "invalid"))) for e in exc.errors()]
        names = ", ".join(dict.fromkeys(loc_text(loc) for loc, _ in errs))
        return problem_response(problem(422, "validation", f"{len(errs)} invalid field(s): {names}", errs))

    @app.exception_handler(InputError)
    async def _input_error(request: Request, exc: InputError):
        return problem_response(problem(422, "unknown-id" if exc.suggestions is not None else "invalid-input",
                                        str(exc), input_error_locs(exc), exc.suggestions))

    @app.exception_handler(UnknownId)
    async def _unknown(request: Request, exc: UnknownId):
        return problem_response(problem(422, "unknown-id", str(exc), [(["body", *UNKNOWN_ID_FIELDS.get(
            exc.kind, ())], str(exc))], exc.suggestions))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException):
        kind = {404: "not-found", 405: "method-not-allowed"}.get(exc.status_code, "http")
        detail = exc.detail if isinstance(exc.detail, str) else PROBLEM_TITLES_BY_STATUS.get(exc.status_code, "")
        errs = [(["path"], detail)] if exc.status_code == 404 else []
        headers = dict(exc.headers or {})
        if exc.status_code == 405:  # every method of the path as documented, not only the first route's
            routes = [r for r in (*v1.routes, *app.routes) if getattr(r, "methods", None) and hasattr(r, "matches")]
            first = next((r for r in routes if r.matches(request.scope)[0] != Match.NONE), None)
            allowed = {m for r in routes if first is not None and r.path == first.path for m in r.methods}
            if allowed:
                headers["Allow"] = ", ".join(sorted(allowed))
        return problem_response(problem(exc.status_code, kind, detail, errs), headers=headers or None)

    @app.exception_handler(Busy)
    async def _busy(request: Request, exc: Busy):
        return problem_response(problem(503, "busy", "all solve workers are busy; retry later"),
                                headers={"Retry-After": str(exc.retry_after)})

    @app.exception_handler(ClientGone)
    async def _gone(request: Request, exc: ClientGone):
        # Nobody reads this answer (499 is the usual log code for "client closed the request").
        return problem_response(problem(499, "client-closed", "client disconnected before its answer"))


def add_health_and_docs(app: FastAPI, st: AppState) -> None:
    settings = st.settings

    @app.api_route("/healthz", methods=["GET", "HEAD"], response_model=Health, tags=["health"],
                   operation_id="health", description="HEAD answers the same without a body (for load balancers).")
    async def healthz() -> Health:
        p = st._pool
        return Health(status="ok", version=__version__, workers=settings.workers,
                      busy=p.busy if p else 0, waiting=p.waiting if p else 0,
                      abandoned=p.abandoned if p else 0, cancelled=p.cancelled if p else 0,
                      solve_in=settings.solve_in,
                      workers_replaced=p.processes.replaced if p and p.processes else 0)

    # /docs: Swagger UI from the fastapi-offline package's files (no CDN)
    app.mount(DOCS_STATIC, StaticFiles(directory=_swagger_assets()), name="docs-static")

    @app.get("/docs", include_in_schema=False)
    async def docs() -> HTMLResponse:
        return get_swagger_ui_html(openapi_url="/openapi.json", title="rack-advisor API",
                                   swagger_js_url=f"{DOCS_STATIC}/swagger-ui-bundle.js",
                                   swagger_css_url=f"{DOCS_STATIC}/swagger-ui.css",
                                   swagger_favicon_url=f"{DOCS_STATIC}/favicon.png")


def add_catalog_routes(v1: APIRouter, st: AppState) -> None:
    """One typed route pair per catalog kind: the list, and one entry by id (404 with close matches)."""

    def add(kind: str, model: type[BaseModel]) -> None:
        async def list_entries() -> list:
            return list(getattr(st.catalog(), kind))

        async def get_entry(entry_id: str):
            try:
                return getattr(st.catalog(), kind)[entry_id]
            except UnknownId as e:
                return problem_response(problem(404, "unknown-id", str(e), [(["path", "entry_id"], str(e))],
                                                e.suggestions))

        camel = "".join(w.title() for w in kind.split("_"))
        v1.add_api_route(f"/catalog/{kind}", list_entries, methods=["GET"], response_model=list[model],
                         tags=["catalog"], summary=f"List {kind}", operation_id=f"list{camel}")
        v1.add_api_route(f"/catalog/{kind}/{{entry_id}}", get_entry, methods=["GET"], response_model=model,
                         tags=["catalog"], summary=f"One entry of {kind}", operation_id=f"get{camel}",
                         responses={404: {"model": Problem, "description": "Unknown id, with close matches."}})

    for kind, model in CATALOG_KINDS.items():
        add(kind, model)


def add_solve_routes(v1: APIRouter, st: AppState) -> None:
    """evaluate, optimize, compare, chip-vs-rack and export: each a service-layer call run by the solve pool with
    the request's time limit capped by the server's."""

    @v1.post("/evaluate", response_model=Evaluation, tags=["solve"], operation_id="evaluate")
    async def evaluate_ep(req: EvaluateRequest, request: Request) -> Evaluation:
        return await st.pool.run(api_jobs.evaluate_job, req, disconnected=request.is_disconnected)

    @v1.post("/optimize", response_model=OptimizeResult, tags=["solve"], operation_id="optimize",
             description="Infeasible budgets are answered 200 with status `infeasible` and a diagnosis.")
    async def optimize_ep(req: OptimizeRequest, request: Request) -> OptimizeResult:
        return await st.pool.run(api_jobs.optimize_job, req, st.cap(req.time_limit_s),
                                 time.time() + st.cap(req.time_limit_s), disconnected=request.is_disconnected)

    @v1.post("/compare", response_model=LayoutComparison, tags=["solve"], operation_id="compare")
    async def compare_ep(req: CompareRequest, request: Request) -> LayoutComparison:
        return await st.pool.run(api_jobs.compare_job, req, st.cap(req.time_limit_s),
                                 time.time() + st.cap(req.time_limit_s), disconnected=request.is_disconnected)

    @v1.post("/chip-vs-rack", response_model=ChipVsRack, tags=["solve"], operation_id="chipVsRack")
    async def chip_vs_rack_ep(req: ChipVsRackRequest, request: Request) -> ChipVsRack:
        return await st.pool.run(api_jobs.chip_vs_rack_job, req, st.cap(req.time_limit_s),
                                 disconnected=request.is_disconnected)

    @v1.post("/export", tags=["export"], operation_id="export", response_model=ExportOut,
             responses={200: {"content": {"application/yaml": {}, "text/plain": {}},  # multi-document YAML
                              "description": "The artifact: k8s and prometheus as YAML, slurm as a text bundle; "
                                             "with `Accept: application/json`, an ExportOut object that carries it."}})
    async def export_ep(req: ExportRequest, request: Request) -> Response:
        art = await st.pool.run(api_jobs.export_job, req, st.cap(req.time_limit_s),
                                disconnected=request.is_disconnected)
        if _wants_json(request.headers.get("accept", "")):
            return Response(ExportOut(format=req.format, filename=art.filename, media_type=art.media_type,
                                      text=art.text).model_dump_json(), media_type="application/json")
        return PlainTextResponse(art.text, media_type=art.media_type,
                                 headers={"Content-Disposition": f'attachment; filename="{art.filename}"'})


def add_report_routes(v1: APIRouter, st: AppState) -> None:
    """Create (render in the solve pool, store in SQLite), list, fetch as HTML or JSON, and delete reports."""
    settings = st.settings

    def report_urls(rid: str) -> tuple[str, str]:
        base = settings.public_base_url or ""  # never the Host header: relative unless configured
        return f"{base}/v1/reports/{rid}", f"{base}/v1/reports/{rid}.json"

    def not_found(rid: str) -> HTTPException:
        return HTTPException(404, "no report with this id")

    @v1.post("/reports", response_model=ReportCreated, status_code=201, tags=["reports"],
             operation_id="createReport")
    async def create_report(req: ReportRequest, request: Request) -> ReportCreated:
        req = req.model_copy(update={"time_limit_s": st.cap(req.time_limit_s),
                                     "sweep_time_limit_s": min(req.sweep_time_limit_s,
                                                               settings.report_sweep_time_limit_s,
                                                               settings.time_limit_cap_s),
                                     "sweep_budget_s": min(req.sweep_budget_s, settings.report_sweep_budget_s)})

        html, data = await st.pool.run(api_jobs.report_job, req, time.time() + req.time_limit_s,
                                       disconnected=request.is_disconnected)
        rec = await anyio.to_thread.run_sync(st.store.put, req.model_dump(mode="json"), data, html)
        url, json_url = report_urls(rec.id)
        return ReportCreated(id=rec.id, url=url, json_url=json_url, created=rec.created)

    @v1.get("/reports", response_model=ReportPage, tags=["reports"], operation_id="listReports")
    async def list_reports(limit: int = Query(default=50, ge=1, le=500, description="Reports per page."),
                           offset: int = Query(default=0, ge=0, le=10**9,
                                               description="Reports to skip (newest first).")) -> ReportPage:
        total, rows = await anyio.to_thread.run_sync(st.store.list, limit, offset)
        items = [ReportSummary(id=rid, created=created, url=report_urls(rid)[0], json_url=report_urls(rid)[1])
                 for rid, created in rows]
        nxt = offset + len(items)
        return ReportPage(items=items, total=total, limit=limit, offset=offset,
                          next_offset=nxt if nxt < total else None)

    @v1.get("/reports/{report_id}.json", response_model=StoredReportOut, tags=["reports"],
            operation_id="getReportJson", responses={404: {"model": Problem}})
    async def report_json(report_id: str) -> StoredReportOut:
        rec = await anyio.to_thread.run_sync(st.store.get, report_id)
        if rec is None:
            raise not_found(report_id)
        return StoredReportOut(id=rec.id, created=rec.created, request=ReportRequest.model_validate(rec.request),
                               result=rec.result)

    @v1.get("/reports/{report_id}", response_class=HTMLResponse, tags=["reports"], operation_id="getReportHtml",
            responses={200: {"content": {"text/html": {"schema": {"type": "string"}}}}, 404: {"model": Problem}})
    async def report_html(report_id: str) -> HTMLResponse:
        html = await anyio.to_thread.run_sync(st.store.get_html, report_id)
        if html is None:
            raise not_found(report_id)
        return HTMLResponse(html, headers={
            "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; img-src data:",
            "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"})

    @v1.delete("/reports/{report_id}", status_code=204, tags=["reports"], operation_id="deleteReport",
               response_class=Response, responses={404: {"model": Problem}})
    async def delete_report(report_id: str) -> Response:
        if not await anyio.to_thread.run_sync(st.store.delete, report_id):
            raise not_found(report_id)
        return Response(status_code=204)


def document_openapi(app: FastAPI, settings: ApiSettings) -> None:
    """Document the API key (the middleware enforces it) and errors as problem documents in OpenAPI."""
    original_openapi = app.openapi

    def openapi() -> dict:
        if app.openapi_schema:
            return app.openapi_schema
        with warnings.catch_warnings():  # GET and HEAD /healthz share one route, hence one id: renamed below
            warnings.filterwarnings("ignore", message="Duplicate Operation ID health")
            schema = original_openapi()
        head = schema["paths"].get("/healthz", {}).get("head")
        if head is not None:  # the same answer without a body: nothing to parse
            head["operationId"] = "healthHead"
            head["responses"]["200"] = {"description": "The server is up (no body)."}
        ref = {"$ref": "#/components/schemas/Problem"}
        for ops in schema.get("paths", {}).values():
            for op in ops.values():
                for code, resp in op.get("responses", {}).items():
                    if code[0] in "45":  # errors are problem documents whatever the route's success type
                        resp["content"] = {PROBLEM_MEDIA_TYPE: {"schema": ref}}
        if settings.api_key is not None:
            schema.setdefault("components", {}).setdefault("securitySchemes", {})["APIKeyHeader"] = {
                "type": "apiKey", "in": "header", "name": API_KEY_HEADER}
            schema["security"] = [{"APIKeyHeader": []}]
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]


PROBLEM_TITLES_BY_STATUS = {404: "not found", 405: "method not allowed"}
UNKNOWN_ID_FIELDS = {"workload": ("workload",), "rack": ("rack",), "gpu": ("gpu_ids",), "cpu": ("cpu_ids",)}
"""Request field an unknown id of a catalog kind most likely came from (for `loc` when nothing more is known)."""
_WHERE = re.compile(r"^(?P<field>[A-Za-z_]+)(?: '[^']*')?: \d+ problem\(s\)$")
_LINE = re.compile(r"^  (?P<path>\S+): (?P<msg>.*)$")
_PATH_PART = re.compile(r"\[(\d+)\]|\.?([^.\[]+)")


def _split_path(path: str) -> list[str | int]:
    return [int(m.group(1)) if m.group(1) is not None else m.group(2) for m in _PATH_PART.finditer(path)]


def input_error_locs(exc: InputError) -> list[tuple[list, str]]:
    """The fields an InputError is about: its own `loc` when it has one; else read from its message, which names
    them (advisor.errors.describe_validation: "rack: 2 problem(s)" then "  id: Field required" lines; "unknown
    rack id ..."; "configuration 'x': ..."), else the body as a whole."""
    msg = str(exc)
    if exc.loc is not None:
        return [(list(exc.loc), msg.splitlines()[0])]
    lines = msg.splitlines()
    m = _WHERE.match(lines[0]) if lines else None
    if m:
        out = []
        for line in lines[1:]:
            lm = _LINE.match(line)
            if lm:
                path = [] if lm["path"] == "(top level)" else _split_path(lm["path"])
                out.append((["body", m["field"], *path], lm["msg"]))
        if out:
            return out
    um = re.match(r"^(?:configuration '[^']*': )?unknown (\w+) id", msg)
    if um and um[1] in UNKNOWN_ID_FIELDS:
        return [(["body", *UNKNOWN_ID_FIELDS[um[1]]], lines[0])]
    head = re.match(r"^(\w+)\b", msg)
    if head and head[1] in ("configuration", "workload", "rack", "assumptions", "settings"):
        return [(["body", head[1]], lines[0] if lines else msg)]
    return [(["body"], lines[0] if lines else msg)]


class ExportOut(BaseModel):
    """An export as JSON (with `Accept: application/json`)."""

    format: Literal["k8s", "slurm", "prometheus"]
    filename: str
    """Suggested file name."""
    media_type: str
    """`application/yaml` (k8s, prometheus) or `text/plain` (slurm bundle)."""
    text: str
    """The artifact itself."""


def _wants_json(accept: str) -> bool:
    """JSON when the client asks for it ahead of YAML and plain text (`*/*` or nothing: the artifact as is)."""
    kinds = [a.split(";", 1)[0].strip().lower() for a in accept.split(",") if a.strip()]
    return bool(kinds) and kinds[0] == "application/json"


def _swagger_assets() -> str:
    import fastapi_offline

    return str(Path(fastapi_offline.__file__).parent / "static")


app = create_app()
