"""HTTP API (FastAPI), versioned under /v1: catalog look-ups, evaluate, optimize, compare and stored HTML reports.

Run it with `advisor serve` or `uvicorn advisor.api.app:app`. Solves run in a bounded pool of settings.workers worker
processes (advisor/api/workers.py; settings.solve_in = "thread" runs them in threads of the server instead); a request
that cannot get a slot within settings.queue_wait_s is answered 503 with Retry-After, so the event loop (and
/healthz) always stays responsive.
"""

from __future__ import annotations

import hmac
import json
import logging
import math
import time
from contextlib import asynccontextmanager
from typing import Any, Awaitable, Callable, Literal, TypeVar

import anyio
from fastapi import APIRouter, FastAPI, HTTPException, Request
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse
from pydantic import BaseModel

from advisor import __version__
from advisor.api import jobs as api_jobs
from advisor.cancel import CancelToken, Cancelled, cancellable
from advisor.catalog import builtin_catalog, catalog_refs_only, load_catalog
from advisor.optimizer.compare import LayoutComparison
from advisor.errors import InputError
from advisor.optimizer.optimize import OptimizeResult
from advisor.report.html import ReportRequest
from advisor.requests import CompareRequest, EvaluateRequest, ExportRequest, OptimizeRequest
from advisor.api.settings import ApiSettings
from advisor.api.store import ReportStore
from advisor.api.workers import WorkerDied, WorkerProcesses
from models.catalog import Catalog, UnknownId
from models.hardware import Chassis, CpuSku, GpuSku, Rack, RackSystem, Switch
from models.pipeline import Evaluation
from models.workload import ServedModel, Workload

log = logging.getLogger("advisor.api.app")
T = TypeVar("T")
API_KEY_HEADER = "X-API-Key"
OPEN_PATHS = ("/healthz",)
"""Paths that never need the API key."""
CATALOG_KINDS: dict[str, type[BaseModel]] = {
    "cpus": CpuSku, "gpus": GpuSku, "chassis": Chassis, "racks": Rack, "workloads": Workload,
    "served_models": ServedModel, "systems": RackSystem, "switches": Switch,
}


# ------------------------------------------------------------------------------------------------ request / response

class ReportCreated(BaseModel):
    id: str
    url: str
    """The HTML report."""
    json_url: str
    """The report's figures as JSON."""
    created: str


class StoredReportOut(BaseModel):
    id: str
    created: str
    request: dict[str, Any]
    result: dict[str, Any]


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


class ErrorOut(BaseModel):
    detail: Any
    suggestions: list[str] | None = None


ERRORS = {400: {"model": ErrorOut, "description": "The body is not JSON, or Content-Length is not a number."},
          401: {"model": ErrorOut}, 403: {"model": ErrorOut}, 413: {"model": ErrorOut},
          422: {"model": ErrorOut, "description": "Invalid input; the message (or each error's `loc`) names the field."},
          503: {"model": ErrorOut, "description": "No solve slot within queue_wait_s; see Retry-After.",
                "headers": {"Retry-After": {"schema": {"type": "integer"}, "description": "Seconds to wait."}}}}
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

def _plain(status: int, detail: str, headers: dict[str, str] | None = None) -> tuple[int, bytes, list]:
    body = json.dumps({"detail": detail}).encode()
    hs = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    hs += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    return status, body, hs


class GuardMiddleware:
    """API key check (all paths but /healthz) and request body limit (Content-Length and the streamed body),
    before the application sees the request. The body is buffered (it is at most max_body_bytes)."""

    def __init__(self, app, settings: ApiSettings):
        self.app, self.settings = app, settings

    async def _send(self, send, status: int, body: bytes, headers: list) -> None:
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        key = self.settings.api_key
        if key is not None and scope["path"] not in OPEN_PATHS:
            given = headers.get(API_KEY_HEADER.lower())
            if not given:
                return await self._send(send, *_plain(401, f"missing API key (header {API_KEY_HEADER})",
                                                      {"WWW-Authenticate": API_KEY_HEADER}))
            if not hmac.compare_digest(given.encode(), key.get_secret_value().encode()):
                return await self._send(send, *_plain(403, "invalid API key"))
        limit = self.settings.max_body_bytes
        too_big = f"request body larger than {limit:,} bytes"
        cl = headers.get("content-length")
        if cl is not None:
            try:
                if int(cl) > limit:
                    return await self._send(send, *_plain(413, too_big))
            except ValueError:
                return await self._send(send, *_plain(400, "invalid Content-Length"))
        if scope["method"] in ("GET", "HEAD", "OPTIONS", "DELETE") and cl is None \
                and "chunked" not in headers.get("transfer-encoding", ""):
            return await self.app(scope, receive, send)
        chunks, size = [], 0
        while True:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                return
            chunk = msg.get("body", b"")
            size += len(chunk)
            if size > limit:
                return await self._send(send, *_plain(413, too_big))
            chunks.append(chunk)
            if not msg.get("more_body", False):
                break
        body = b"".join(chunks)
        sent = False

        async def replay():
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        return await self.app(scope, replay, send)


# ------------------------------------------------------------------------------------------------------------- app

def create_app(settings: ApiSettings | None = None, catalog: Catalog | None = None) -> FastAPI:
    settings = settings or ApiSettings()
    state: dict[str, Any] = {}

    def get_catalog() -> Catalog:
        if catalog is not None:
            return catalog
        if "catalog" not in state:
            state["catalog"] = load_catalog(settings.catalog) if settings.catalog else builtin_catalog()
        return state["catalog"]

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        get_catalog()
        processes = None
        if settings.solve_in == "process":
            processes = WorkerProcesses(settings.workers, settings.catalog, catalog, settings.worker_nice,
                                        settings.worker_start_timeout_s)
            await anyio.to_thread.run_sync(processes.start)
        state["pool"] = SolvePool(settings.workers, settings.queue_wait_s, get_catalog, processes)
        state["store"] = ReportStore(settings.database)
        try:
            yield
        finally:
            if processes is not None:
                await anyio.to_thread.run_sync(processes.stop)

    app = FastAPI(
        title="rack-advisor", version=__version__, lifespan=lifespan,
        description="Fill data-center racks for the most agentic AI tasks per hour: catalog, evaluate, optimize, "
                    "compare layouts A/B/hybrid, and self-contained HTML recommendation reports.",
    )
    app.add_middleware(GuardMiddleware, settings=settings)

    def pool() -> SolvePool:
        return state["pool"]

    def store() -> ReportStore:
        return state["store"]

    def cap(t: float | None) -> float:
        return min(t, settings.time_limit_cap_s) if t else settings.time_limit_cap_s

    # -- errors: messages, never stack traces
    @app.exception_handler(InputError)
    async def _input_error(request: Request, exc: InputError):
        return JSONResponse({"detail": str(exc)}, status_code=422)

    @app.exception_handler(UnknownId)
    async def _unknown(request: Request, exc: UnknownId):
        return JSONResponse({"detail": str(exc), "suggestions": exc.suggestions}, status_code=422)

    @app.exception_handler(Busy)
    async def _busy(request: Request, exc: Busy):
        return JSONResponse({"detail": "all solve workers are busy; retry later"}, status_code=503,
                            headers={"Retry-After": str(exc.retry_after)})

    @app.exception_handler(ClientGone)
    async def _gone(request: Request, exc: ClientGone):
        # Nobody reads this answer (499 is the usual log code for "client closed the request").
        return JSONResponse({"detail": "client disconnected before a solve slot was free"}, status_code=499)

    @app.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception):
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return JSONResponse({"detail": "internal error"}, status_code=500)

    @app.get("/healthz", response_model=Health, tags=["health"])
    async def healthz() -> Health:
        p = state.get("pool")
        return Health(status="ok", version=__version__, workers=settings.workers,
                      busy=p.busy if p else 0, waiting=p.waiting if p else 0,
                      abandoned=p.abandoned if p else 0, cancelled=p.cancelled if p else 0,
                      solve_in=settings.solve_in,
                      workers_replaced=p.processes.replaced if p and p.processes else 0)

    v1 = APIRouter(prefix="/v1", responses=ERRORS)

    # -- catalog: one typed route pair per kind
    def add_catalog_routes(kind: str, model: type[BaseModel]) -> None:
        async def list_entries() -> list:
            return list(getattr(get_catalog(), kind))

        async def get_entry(entry_id: str):
            try:
                return getattr(get_catalog(), kind)[entry_id]
            except UnknownId as e:
                return JSONResponse({"detail": str(e), "suggestions": e.suggestions}, status_code=404)

        v1.add_api_route(f"/catalog/{kind}", list_entries, methods=["GET"], response_model=list[model],
                         tags=["catalog"], summary=f"List {kind}", operation_id=f"list_{kind}")
        v1.add_api_route(f"/catalog/{kind}/{{entry_id}}", get_entry, methods=["GET"], response_model=model,
                         tags=["catalog"], summary=f"One entry of {kind}", operation_id=f"get_{kind}",
                         responses={404: {"model": ErrorOut, "description": "Unknown id, with close matches."}})

    for kind, model in CATALOG_KINDS.items():
        add_catalog_routes(kind, model)

    @v1.post("/evaluate", response_model=Evaluation, tags=["solve"])
    async def evaluate_ep(req: EvaluateRequest, request: Request) -> Evaluation:
        return await pool().run(api_jobs.evaluate_job, req, disconnected=request.is_disconnected)

    @v1.post("/optimize", response_model=OptimizeResult, tags=["solve"],
             description="Infeasible budgets are answered 200 with status `infeasible` and a diagnosis.")
    async def optimize_ep(req: OptimizeRequest, request: Request) -> OptimizeResult:
        return await pool().run(api_jobs.optimize_job, req, cap(req.time_limit_s),
                                disconnected=request.is_disconnected)

    @v1.post("/compare", response_model=LayoutComparison, tags=["solve"])
    async def compare_ep(req: CompareRequest, request: Request) -> LayoutComparison:
        return await pool().run(api_jobs.compare_job, req, cap(req.time_limit_s),
                                disconnected=request.is_disconnected)

    @v1.post("/export", tags=["export"], response_class=PlainTextResponse,
             responses={200: {"content": {"application/yaml": {}, "text/plain": {}},
                              "description": "The artifact: k8s and prometheus as YAML, slurm as a text bundle."}})
    async def export_ep(req: ExportRequest, request: Request) -> PlainTextResponse:
        art = await pool().run(api_jobs.export_job, req, cap(req.time_limit_s), disconnected=request.is_disconnected)
        return PlainTextResponse(art.text, media_type=art.media_type,
                                 headers={"Content-Disposition": f'attachment; filename="{art.filename}"'})

    @v1.post("/reports", response_model=ReportCreated, status_code=201, tags=["reports"])
    async def create_report(req: ReportRequest, request: Request) -> ReportCreated:
        req = req.model_copy(update={"time_limit_s": cap(req.time_limit_s),
                                     "sweep_time_limit_s": min(req.sweep_time_limit_s,
                                                               settings.report_sweep_time_limit_s,
                                                               settings.time_limit_cap_s),
                                     "sweep_budget_s": min(req.sweep_budget_s, settings.report_sweep_budget_s)})

        html, data = await pool().run(api_jobs.report_job, req, disconnected=request.is_disconnected)
        rec = await anyio.to_thread.run_sync(store().put, req.model_dump(mode="json"), data, html)
        base = str(request.base_url).rstrip("/")
        return ReportCreated(id=rec.id, url=f"{base}/v1/reports/{rec.id}",
                             json_url=f"{base}/v1/reports/{rec.id}.json", created=rec.created)

    def _not_found(rid: str) -> HTTPException:
        return HTTPException(404, f"no report {rid!r}")

    @v1.get("/reports/{report_id}.json", response_model=StoredReportOut, tags=["reports"],
            responses={404: {"model": ErrorOut}})
    async def report_json(report_id: str) -> StoredReportOut:
        rec = await anyio.to_thread.run_sync(store().get, report_id)
        if rec is None:
            raise _not_found(report_id)
        return StoredReportOut(id=rec.id, created=rec.created, request=rec.request, result=rec.result)

    @v1.get("/reports/{report_id}", response_class=HTMLResponse, tags=["reports"],
            responses={200: {"content": {"text/html": {}}}, 404: {"model": ErrorOut}})
    async def report_html(report_id: str) -> HTMLResponse:
        html = await anyio.to_thread.run_sync(store().get_html, report_id)
        if html is None:
            raise _not_found(report_id)
        return HTMLResponse(html, headers={
            "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; img-src data:",
            "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"})

    app.include_router(v1)

    # document the API key in OpenAPI (the middleware enforces it)
    original_openapi = app.openapi

    def openapi() -> dict:
        if app.openapi_schema:
            return app.openapi_schema
        schema = original_openapi()
        for ops in schema.get("paths", {}).values():
            for op in ops.values():
                for code, resp in op.get("responses", {}).items():
                    if code[0] in "45" and "content" in resp:  # errors are JSON whatever the route's success type
                        resp["content"] = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorOut"}}}
        if settings.api_key is not None:
            schema.setdefault("components", {}).setdefault("securitySchemes", {})["APIKeyHeader"] = {
                "type": "apiKey", "in": "header", "name": API_KEY_HEADER}
            schema["security"] = [{"APIKeyHeader": []}]
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app


app = create_app()
