"""ASGI middleware in front of KServe's REST app: the request size limit."""


class RequestSizeLimit:
    """ASGI middleware: a request body over `limit` bytes is answered 413 with the
    protocol's {"error": ...}, by its Content-Length before anything is read, or while
    a chunked body is read, before it is parsed."""

    def __init__(self, app, limit):
        self.app, self.limit = app, limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = dict(scope.get("headers") or ()).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.limit):
            return await self._refuse(send, length.decode("latin-1"))
        seen, started, refused = 0, False, False

        async def counted_receive():
            # Over the limit mid-body: answer 413 here and tell the app the client left
            # (an exception raised here would reach FastAPI's body parser, which answers
            # 400 "There was an error parsing the body" for any)
            nonlocal seen, refused
            if refused:
                return {"type": "http.disconnect"}
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.limit:
                refused = True
                if not started:
                    await self._refuse(send, f"more than {self.limit}")
                return {"type": "http.disconnect"}
            return message

        async def watched_send(message):
            nonlocal started
            if refused:  # (the app's answer to the "disconnect": the client has its 413)
                return
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted_receive, watched_send)
        except Exception:
            if not refused:
                raise

    async def _refuse(self, send, size):
        import orjson

        body = orjson.dumps({"error": f"request body of {size} bytes: this server takes at most {self.limit} "
                                      f"(--max-request-bytes)"})
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})
