"""A sample function for the Worker: greets whoever the args name.

    workerctl submit hello '{"name": "Ada"}' --watch
"""


def handler(args, ctx):
    name = args.get("name", "world") if isinstance(args, dict) else "world"
    ctx.logger.info("greeting %s", name)
    return {"greeting": "Hello, %s!" % name, "task_id": ctx.task_id, "epoch": ctx.epoch}
