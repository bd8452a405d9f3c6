import pathlib
pathlib.Path("/tmp/mlsys-adversarial-sitecustomize").touch()
