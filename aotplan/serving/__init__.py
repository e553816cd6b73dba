"""`aotplan serve`: frozen plans on the open inference protocol (KServe v2 / Triton).

Above the executor and beside the commands: an inference host runs it without the
compiler. Its modules that import KServe (model, server) are imported only when
serving; the rest (tensors, profiles, catalog) are plain checks and arithmetic.
"""
