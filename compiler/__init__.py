"""The aotplan compiler: model.json -> plan. See `compiler.pipeline`.

`compiler.compile(model, ...) -> Plan` is its entry point from Python (compiler/api.py),
imported when first used (importing `compiler` stays light)."""


def __getattr__(name):
    if name == "compile":
        from compiler.api import compile

        return compile
    raise AttributeError(f"module 'compiler' has no attribute {name!r}")
