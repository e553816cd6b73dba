"""The aotplan compiler: model.json -> plan. See `compiler.pipeline`."""
