#!/bin/sh
# check_exports.sh LIB - the library must export exactly the interposed libc symbols
# (everything else is -fvisibility=hidden), so it cannot clash with an application.
set -eu
want="__read_chk __recv_chk __recvfrom_chk accept accept4 close connect dup dup2 dup3 fcntl fcntl64 getpeername getsockopt read readv recv recvfrom recvmsg send sendmsg sendto write writev"
got=$(nm -D --defined-only "$1" | awk '{print $3}' | sort | tr '\n' ' ' | sed 's/ $//')
if [ "$got" != "$want" ]; then
    echo "exported symbols differ:"; echo " got:  $got"; echo " want: $want"; exit 1
fi
echo "exports: 1 passed, 0 failed"
