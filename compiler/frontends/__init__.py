"""Front ends: other model formats -> aotplan Graph (then the usual passes)."""
