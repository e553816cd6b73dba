"""The server: KServe's REST (FastAPI on uvicorn) and gRPC servers, on the address the
deployer names.

KServe 0.21's `ModelServer.start` binds 0.0.0.0 and [::] with no option, and its
`stop` unloads the models while gRPC is still draining. This module builds the same
servers from KServe's own parts (`RESTServer`, the v2 `InferenceServicer`, its
interceptors) and changes only where they listen and the order they stop in:
SIGTERM or SIGINT lets uvicorn finish the requests in flight (up to the grace period),
then gRPC drains the same way, then the models' step threads end, and the process
exits 0.
"""

import asyncio
import importlib
import signal
import sys

from aotplan.core.errors import AotplanError
from aotplan.serving.http_guards import RequestSizeLimit
from aotplan.serving.rest_infer import add_infer_route

INSTALL = "pip install 'aotplan[serve]'"


def import_kserve():
    """Import KServe without letting it read this command's arguments (its model_server
    module parses sys.argv when imported, taking foreign flags as its own)."""
    saved = sys.argv
    sys.argv = saved[:1]
    try:
        importlib.import_module("kserve.model_server")  # (its module-level app and argument parser)
    except ImportError as e:
        raise AotplanError(f"aotplan serve needs KServe's model server ({e.name} is not installed): {INSTALL}") \
            from None
    finally:
        sys.argv = saved


class OneLineForClientErrors:
    """logging.Filter for KServe's logger: a request refused as invalid (HTTP 400, gRPC
    INVALID_ARGUMENT) is logged as one line, not the traceback KServe logs for each (a
    client's mistake is no server fault; a log of tracebacks hides the real ones)."""

    def filter(self, record):
        exc = record.exc_info[1] if record.exc_info else None
        from kserve.errors import InvalidInput

        if isinstance(exc, InvalidInput):
            record.msg, record.args, record.exc_info, record.exc_text = f"refused a request: {exc}", (), None, None
        return True


def quiet_kserve():
    import logging
    import warnings

    logging.getLogger("kserve").addFilter(OneLineForClientErrors())
    # KServe 0.21's app sets FastAPI's default response class to ORJSONResponse, which
    # FastAPI 0.1xx deprecates with a warning on every request
    warnings.filterwarnings("ignore", message=".*ORJSONResponse is deprecated")


class Server:
    """`models`: PlanModels, loaded and ready. `grpc_port` None: REST only."""

    def __init__(self, models, host, http_port, grpc_port, max_request_bytes, grace_s=30, max_grpc_threads=4,
                 on_ready=None):
        import_kserve()
        from kserve import model_server
        from kserve.model_repository import ModelRepository
        from kserve.protocol.dataplane import DataPlane
        from kserve.protocol.model_repository_extension import ModelRepositoryExtension
        from kserve.protocol.rest.server import RESTServer

        self.models = models
        self.host, self.http_port, self.grpc_port = host, http_port, grpc_port
        self.grace_s, self.max_grpc_threads, self.on_ready = grace_s, max_grpc_threads, on_ready
        self.max_request_bytes = max_request_bytes
        quiet_kserve()
        self.registry = ModelRepository()
        for m in models:
            self.registry.update(m, m.name)
        self.dataplane = DataPlane(model_registry=self.registry)
        self.extension = ModelRepositoryExtension(model_registry=self.registry)
        model_server.app.add_middleware(RequestSizeLimit, limit=max_request_bytes)
        add_infer_route(model_server.app, self.dataplane)
        self.rest = RESTServer("kserve.model_server:app", self.dataplane, self.extension, http_port,
                               grace_period=grace_s, event_loop="asyncio")
        self.rest.config.host = host  # (KServe's one hard-coded choice this server changes)
        self.grpc = None
        self._stopping = False

    def run(self):
        """Serve until SIGTERM or SIGINT -> 0."""
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)
        asyncio.run(self._serve())
        return 0

    async def _serve(self):
        self._loop = asyncio.get_running_loop()
        servers = [self.rest.start()]
        if self.grpc_port is not None:
            servers.append(self._grpc())
        ready = asyncio.create_task(self._announce())
        try:
            await asyncio.gather(*servers)
        finally:
            ready.cancel()
            for m in self.models:
                m.stop()

    async def _announce(self):
        while not self.rest._server.started or (self.grpc_port is not None and self.grpc is None):
            await asyncio.sleep(0.01)
        if self.on_ready:
            self.on_ready(self)

    async def _grpc(self):
        from concurrent import futures

        from grpc import aio
        from kserve.protocol.grpc import grpc_predict_v2_pb2_grpc
        from kserve.protocol.grpc.interceptors import ExceptionToStatusInterceptor, LoggingInterceptor
        from kserve.protocol.grpc.servicer import InferenceServicer

        server = aio.server(futures.ThreadPoolExecutor(max_workers=self.max_grpc_threads),
                            interceptors=(LoggingInterceptor(), ExceptionToStatusInterceptor()),
                            options=[("grpc.max_receive_message_length", self.max_request_bytes),
                                     ("grpc.max_send_message_length", -1)])
        grpc_predict_v2_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(
            InferenceServicer(self.dataplane, self.extension), server)
        address = f"[{self.host}]:{self.grpc_port}" if ":" in self.host else f"{self.host}:{self.grpc_port}"
        try:
            bound = server.add_insecure_port(address)
        except RuntimeError as e:  # (recent grpcio raises where older ones returned 0)
            raise AotplanError(f"gRPC: cannot listen on {address}: {e}") from None
        if not bound:
            raise AotplanError(f"gRPC: cannot listen on {address}")
        await server.start()
        self.grpc = server
        if self._stopping:  # (a signal came while it started)
            await server.stop(grace=self.grace_s)
        await server.wait_for_termination()

    def _on_signal(self, signum, frame):
        # uvicorn takes SIGTERM/SIGINT while it serves; it finishes the HTTP requests in
        # flight, then hands the signal on here: gRPC drains next
        self._stopping = True
        self.rest._server.should_exit = True
        if self.grpc is not None:
            self._loop.call_soon_threadsafe(lambda: asyncio.ensure_future(self.grpc.stop(grace=self.grace_s)))
