"""What the ported data-plane tests share beyond upstream's conftest.

E2B's templates run commands in ``/home/user`` and resolve relative paths
there; a stasis sandbox's working directory is its image's (``/workspace``
for the ``base`` image). Upstream asserts the literal ``/home/user``; the
ports assert the same thing against the sandbox's own working directory.

``boot_id`` / ``aboot_id``: the kernel's boot id, which upstream reads with
``files.read("/proc/sys/kernel/random/boot_id")``. On the microVM backend
that is what they do; a process sandbox's /proc is a mount the host-side
file API does not cross (it answers ``InvalidArgumentException``), so there
the same file is read by a command in the sandbox.
"""



def home(sandbox) -> str:
    """The sandbox's working directory (E2B's ``/home/user``)."""
    return sandbox.commands.run("pwd").stdout.strip()


async def ahome(sandbox) -> str:
    return (await sandbox.commands.run("pwd")).stdout.strip()


BOOT_ID = "/proc/sys/kernel/random/boot_id"


def boot_id(sandbox) -> str:
    from conftest import BACKEND

    if BACKEND == "microvm":
        return sandbox.files.read(BOOT_ID).strip()
    return sandbox.commands.run(f"cat {BOOT_ID}").stdout.strip()


async def aboot_id(sandbox) -> str:
    from conftest import BACKEND

    if BACKEND == "microvm":
        return (await sandbox.files.read(BOOT_ID)).strip()
    return (await sandbox.commands.run(f"cat {BOOT_ID}")).stdout.strip()
