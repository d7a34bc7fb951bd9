"""No models: this module exists so that ``post_migrate`` is sent for this app (see worker.py)."""
