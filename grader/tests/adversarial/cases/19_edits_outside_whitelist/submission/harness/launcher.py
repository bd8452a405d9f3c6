def launch(*args, **kwargs):
    raise SystemExit(0)
