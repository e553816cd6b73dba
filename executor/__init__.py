"""The aotplan executor: load a plan, allocate its arena once, replay it in place.

Inference hosts install this and `aotplan`; it never imports `compiler`.

    session = executor.load("model.plan")
    outputs = session.run({"x": x})          # {name: numpy array}
"""

from executor.session import Session, load  # noqa: F401
