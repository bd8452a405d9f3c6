from ._honest import *  # noqa: F403
