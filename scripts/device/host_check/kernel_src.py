"""Kernel sources as the host emulations extract them (kernels/ of the repository root)."""


def after(root, path, marker):
    """kernels/`path` from just past its first `marker` (its includes and pragmas dropped)."""
    s = open(f"{root}/kernels/{path}").read()
    return s[s.index(marker) + len(marker):]


def between(s, a, b):
    """The part of `s` from `a` up to `b`."""
    return s[s.index(a):s.index(b)]
