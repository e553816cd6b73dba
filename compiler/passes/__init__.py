"""Compiler passes: each module has one public `run(...)`, frozen data in and out."""
