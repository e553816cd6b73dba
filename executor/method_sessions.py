"""The sessions of a plan's methods: the buffers they share and the first method's view."""

from aotplan.core.errors import FeedError


class Buffers:
    """The device buffers a session's steps replace (every kernel donates them and
    returns the new ones), shared by the sessions of a plan's methods."""

    __slots__ = ("arena", "state", "state_lost")

    def __init__(self):
        self.arena = self.state = None
        self.state_lost = False


class FirstMethod:
    """The session of a plan of several methods, as its first method: `run(feeds)`
    runs that method (the session's own `run` asks which)."""

    def __init__(self, session):
        self._session = session

    def run(self, feeds, device_outputs=False, method=None):
        name = self._session.plan.method
        if method not in (None, name):
            raise FeedError(f"this is method {name!r}: run(feeds) runs it")
        return self._session.run(feeds, device_outputs, method=name)

    def __getattr__(self, name):
        return getattr(self._session, name)


def buffer(name):
    """A Session property that reads and writes the shared `Buffers` field `name`."""
    return property(lambda self: getattr(self._buf, name), lambda self, v: setattr(self._buf, name, v))
