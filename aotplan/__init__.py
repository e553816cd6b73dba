"""aotplan: the shared vocabulary of the compiler and the executor.

Graph IR and the model.json reader, the plan schema and its msgpack codec, the
device-shape math of formats, errors, the plan verifier and the CLI. Nothing in this
package imports `compiler` (the CLI does so only inside the commands that compile).
"""

__version__ = "0.6.0"
