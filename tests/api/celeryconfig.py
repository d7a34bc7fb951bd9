task_default_queue = "from-module"
