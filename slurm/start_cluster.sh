#!/usr/bin/env bash
# Start a real single-node Slurm cluster on this Debian 12 machine, for tests and for
# trying `launcher=slurm` locally. Run as root. Idempotent: a second run with the
# cluster up only checks it (well under a second); with the packages installed and the
# daemons down it takes a few seconds.
#
# What it does, in order (each step skipped when already done):
#   1. installs slurm-wlm, munge, slurmdbd, mariadb-server with apt-get if missing;
#   2. creates our state dir ($STATEAWARE_SLURM_STATE, default /var/run/stateaware-slurm)
#      holding a munge key, a MariaDB data dir, Slurm's spool/state dirs, logs, PID files;
#   3. writes slurm.conf, gres.conf and slurmdbd.conf (into the directory of $SLURM_CONF,
#      default /etc/slurm) for ONE node named `hostname -s` on 127.0.0.1, with a fake
#      GPU (gres.conf File=/dev/null) and accounting through slurmdbd;
#   4. starts mariadbd (socket only, skip-networking), munged, slurmdbd, registers the
#      cluster with sacctmgr, starts slurmctld and slurmd, each with a PID file in
#      $STATE/pids, and waits until `sinfo` shows the node up.
#
# Why not the distribution's services: there is no systemd here (package install scripts
# do not start anything), and a test cluster must not touch a site's real munge/MariaDB.
# Everything we start uses its own socket, key, data dir and PID file under $STATE, so
# slurm/stop_cluster.sh ends exactly these daemons and `rm -rf $STATE` forgets them.
#
# Environment knobs:
#   STATEAWARE_SLURM_STATE        state dir                      [/var/run/stateaware-slurm]
#   SLURM_CONF                    slurm.conf path to write/use   [/etc/slurm/slurm.conf]
#   STATEAWARE_SLURM_CLUSTER      ClusterName                    [stateaware]
#   STATEAWARE_SLURM_PARTITION    the one (default) partition    [debug]
#   STATEAWARE_SLURM_TIMEOUT_S    seconds to wait for each step  [60]
#   STATEAWARE_SLURM_OVERWRITE=1  replace a slurm.conf we did not write (refused otherwise)
set -euo pipefail

STATE="${STATEAWARE_SLURM_STATE:-/var/run/stateaware-slurm}"
SLURM_CONF_PATH="${SLURM_CONF:-/etc/slurm/slurm.conf}"
CONF_DIR="$(dirname "$SLURM_CONF_PATH")"
CLUSTER="${STATEAWARE_SLURM_CLUSTER:-stateaware}"
PARTITION="${STATEAWARE_SLURM_PARTITION:-debug}"
TIMEOUT_S="${STATEAWARE_SLURM_TIMEOUT_S:-60}"
NODE="$(hostname -s)"
# Marks every file we write; a config without it belongs to someone else and is kept.
MARKER="# Written by stateaware slurm/start_cluster.sh"
PACKAGES=(slurm-wlm munge slurmdbd mariadb-server)
# Start order; slurm/stop_cluster.sh ends them in reverse.
DAEMONS=(mariadbd munged slurmdbd slurmctld slurmd)

export SLURM_CONF="$SLURM_CONF_PATH"

_log() { printf '[start_cluster %s] %s\n' "$(date +%H:%M:%S)" "$*"; }

# _die: a usage or setup error, where daemon logs would only bury the message.
_die() { printf '[start_cluster] ERROR: %s\n' "$*" >&2; exit 1; }

_fail() {
    # Print the reason, then the tail of every daemon log, so CI output shows the cause.
    printf '[start_cluster] ERROR: %s\n' "$*" >&2
    local f
    # *.log: the daemons' own logs; *.out: what they wrote to stdout/stderr.
    for f in "$STATE"/log/*.log "$STATE"/log/*.out; do
        [ -s "$f" ] || continue
        printf '\n----- tail -n 25 %s -----\n' "$f" >&2
        tail -n 25 "$f" >&2 || true
    done
    exit 1
}

# A PID file counts only while its process is alive and is the daemon we expect, so a
# stale file whose PID was reused by something else is never mistaken for ours.
_pid_alive() {
    local name="$1" pidfile="$STATE/pids/$1.pid" pid
    [ -s "$pidfile" ] || return 1
    pid="$(tr -dc '0-9' <"$pidfile")"
    [ -n "$pid" ] && [ -r "/proc/$pid/comm" ] || return 1
    [ "$(cat "/proc/$pid/comm")" = "$name" ] || return 1
    # A zombie (exited, not yet reaped by PID 1, which here may reap late) is not running.
    [ "$(sed 's/.*) \(.\).*/\1/' "/proc/$pid/stat" 2>/dev/null)" != Z ]
}

# _wait_for NAME WHAT COMMAND...: retry COMMAND every 0.2 s until it succeeds; fail
# with the logs when daemon NAME has exited or after TIMEOUT_S.
_wait_for() {
    local name="$1" what="$2"; shift 2
    local deadline=$((SECONDS + TIMEOUT_S))
    until "$@" >/dev/null 2>&1; do
        _pid_alive "$name" || _fail "$name exited while waiting for $what"
        [ "$SECONDS" -lt "$deadline" ] || _fail "timed out after ${TIMEOUT_S}s waiting for $what"
        sleep 0.2
    done
}

# ---------------------------------------------------------------------------- packages
_install_packages() {
    local missing=() pkg
    for pkg in "${PACKAGES[@]}"; do
        if [ "$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null)" != "install ok installed" ]; then
            missing+=("$pkg")
        fi
    done
    [ "${#missing[@]}" -eq 0 ] && return 0
    _log "installing ${missing[*]} (apt-get)"
    export DEBIAN_FRONTEND=noninteractive
    local aptlog
    aptlog="$(mktemp /tmp/stateaware-slurm-apt.XXXXXX)"
    if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}"; } \
        >"$aptlog" 2>&1; then
        tail -n 40 "$aptlog" >&2
        _die "apt-get could not install ${missing[*]} (full log: $aptlog)"
    fi
    rm -f "$aptlog"
}

# ---------------------------------------------------------------------------- state dir
_make_state_dirs() {
    mkdir -p "$STATE"/{pids,run,log,slurmctld,slurmd,mysql}
    chmod 755 "$STATE"
    # munged refuses a key dir or socket dir that others can write, and wants to own its
    # key: key + seed in a 0700 dir, socket in a 0755 dir so any local user can submit.
    mkdir -p "$STATE/munge/key" "$STATE/munge/run"
    chown munge:munge "$STATE/munge" "$STATE/munge/key" "$STATE/munge/run"
    chmod 755 "$STATE/munge" "$STATE/munge/run"
    chmod 700 "$STATE/munge/key"
    touch "$STATE/log/munged.log" && chown munge:munge "$STATE/log/munged.log"
    touch "$STATE/log/mariadbd.log" && chown mysql:mysql "$STATE/log/mariadbd.log"
    if [ ! -s "$STATE/munge/key/munge.key" ]; then
        _log "creating munge key"
        dd if=/dev/urandom of="$STATE/munge/key/munge.key" bs=1024 count=1 status=none
    fi
    chown munge:munge "$STATE/munge/key/munge.key"
    chmod 400 "$STATE/munge/key/munge.key"
    chown mysql:mysql "$STATE/mysql"
}

# ---------------------------------------------------------------------------- configs
# Node shape from `slurmd -C` (what slurmd will report at registration, so the node is
# never drained for "Low socket*core*thread count"); RealMemory is half of what the
# machine has, because the node is shared with whatever else runs here and a job that
# asks for more than the node has is rejected at submission, not oversubscribed.
_node_line() {
    local probe cpus boards sockets cores threads mem
    probe="$(slurmd -C | head -n 1)"
    _field() { sed -n "s/.* $1=\([0-9]*\).*/\1/p" <<<"$probe"; }
    cpus="$(_field CPUs)"; boards="$(_field Boards)"; sockets="$(_field SocketsPerBoard)"
    cores="$(_field CoresPerSocket)"; threads="$(_field ThreadsPerCore)"; mem="$(_field RealMemory)"
    if [ -z "$cpus" ] || [ -z "$mem" ]; then
        _die "could not read the node shape from 'slurmd -C': $probe"
    fi
    printf 'NodeName=%s NodeAddr=127.0.0.1 NodeHostname=%s CPUs=%s Boards=%s SocketsPerBoard=%s CoresPerSocket=%s ThreadsPerCore=%s RealMemory=%s Gres=gpu:1 State=UNKNOWN' \
        "$NODE" "$NODE" "$cpus" "$boards" "$sockets" "$cores" "$threads" "$((mem / 2))"
}

_slurm_conf() {
    cat <<EOF
$MARKER; edits are overwritten on the next start.
ClusterName=$CLUSTER
SlurmctldHost=$NODE(127.0.0.1)
# Everything runs as root: a throwaway test cluster, no slurm-user file ownership to keep.
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$STATE/munge/run/munge.socket
CredType=cred/munge
StateSaveLocation=$STATE/slurmctld
SlurmdSpoolDir=$STATE/slurmd
# The daemons' own PID files (each removes its file on exit); ours, written at spawn,
# are in $STATE/pids and are what the stop script reads.
SlurmctldPidFile=$STATE/run/slurmctld.pid
SlurmdPidFile=$STATE/run/slurmd.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
# No cgroups in this container: track processes through /proc, bind nothing.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SwitchType=switch/none
# Cores and memory are consumable, so small jobs share the node side by side; a job that
# names no memory gets DefMemPerCPU instead of the whole node.
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=512
GresTypes=gpu
# Failed or preempted jobs may be requeued (submitit's checkpoint/requeue relies on it).
JobRequeue=1
ReturnToService=2
# Short waits between SIGTERM and SIGKILL on scancel/timeout: submitit's worker ignores
# SIGTERM (it waits for its preemption signal), so the default 30 s would make every
# cancellation in the tests take 30 s.
KillWait=2
InactiveLimit=0
MinJobAge=300
SlurmctldTimeout=30
SlurmdTimeout=30
MessageTimeout=10
SchedulerType=sched/backfill
# Accounting is required: submitit reads job states through sacct.
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
# With slurmdbd, "Pass" is the munge socket used to talk to slurmdbd; AuthInfo alone does
# not reach sacct/sacctmgr, which would look for the default /run/munge socket.
AccountingStoragePass=$STATE/munge/run/munge.socket
AccountingStorageTRES=gres/gpu
JobAcctGatherType=jobacct_gather/none
# Job comments are stored (sacct --format=Comment shows each task's run id): Slurm keeps
# them out of the accounting DB by default.
AccountingStoreFlags=job_comment
# A small array limit, so the tests' cohort of 10 processes is split into several job
# arrays in CI time (real sites allow 1001 or more; the launcher reads the limit). The
# other Slurm tests launch at most 3 processes: one array each.
MaxArraySize=4
JobCompType=jobcomp/none
# No mail on this machine; the default /usr/bin/mail is absent and logs an error.
MailProg=/bin/true
$NODE_LINE
PartitionName=$PARTITION Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF
}

_gres_conf() {
    cat <<EOF
$MARKER; edits are overwritten on the next start.
# A fake GPU: Slurm schedules gres/gpu and sets CUDA_VISIBLE_DEVICES / SLURM_JOB_GPUS,
# but there is no device behind it.
AutoDetect=off
NodeName=$NODE Name=gpu File=/dev/null
EOF
}

_slurmdbd_conf() {
    cat <<EOF
$MARKER; edits are overwritten on the next start.
AuthType=auth/munge
AuthInfo=socket=$STATE/munge/run/munge.socket
DbdHost=localhost
DbdAddr=127.0.0.1
SlurmUser=root
PidFile=$STATE/run/slurmdbd.pid
LogFile=$STATE/log/slurmdbd.log
DebugLevel=info
# MariaDB listens on a Unix socket only (skip-networking); slurmdbd reaches it through
# libmariadb's MYSQL_UNIX_PORT, set when we start slurmdbd. root authenticates by socket
# credentials (unix_socket), so no password is stored anywhere.
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=root
StorageLoc=slurm_acct_db
EOF
}

CONFIG_CHANGED=0
# _write_config PATH MODE CONTENT: replace PATH only when CONTENT differs, and never a
# file we did not write (a real site's slurm.conf) unless STATEAWARE_SLURM_OVERWRITE=1.
_write_config() {
    local path="$1" mode="$2" content="$3"
    if [ -f "$path" ]; then
        if [ "$(cat "$path")" = "$content" ]; then
            return 0
        fi
        if ! grep -qF "$MARKER" "$path" && [ "${STATEAWARE_SLURM_OVERWRITE:-0}" != 1 ]; then
            _die "$path exists and was not written by this script; refusing to replace it" \
                "(set STATEAWARE_SLURM_OVERWRITE=1 to replace it, or SLURM_CONF=/other/dir/slurm.conf)"
        fi
    fi
    mkdir -p "$(dirname "$path")"
    printf '%s\n' "$content" >"$path.tmp.$$"
    chmod "$mode" "$path.tmp.$$"
    mv -f "$path.tmp.$$" "$path"
    CONFIG_CHANGED=1
}

_write_configs() {
    NODE_LINE="$(_node_line)" || exit 1
    _write_config "$CONF_DIR/slurm.conf" 644 "$(_slurm_conf)"
    _write_config "$CONF_DIR/gres.conf" 644 "$(_gres_conf)"
    # slurmdbd refuses a config readable by others (it may hold a DB password).
    _write_config "$CONF_DIR/slurmdbd.conf" 600 "$(_slurmdbd_conf)"
    # slurm.conf was written through a temp file; the comparison above reads back the
    # exact file, so a second run with an unchanged machine writes nothing.
}

# ---------------------------------------------------------------------------- daemons
# Daemons run in the foreground of their own session (setsid, stdio to their log): a
# caller that captures this script's output (CI, subprocess.run) is not kept waiting on
# an inherited pipe, and $! is the daemon itself, so its PID file is exact and a daemon
# that dies at startup is noticed at once instead of after the timeout.
# _spawn NAME COMMAND...
_spawn() {
    local name="$1"; shift
    setsid "$@" </dev/null >>"$STATE/log/$name.out" 2>&1 &
    local pid=$!
    echo "$pid" >"$STATE/pids/$name.pid"
    # The PID is ours from the fork, but its name is "setsid"/"env"/"setpriv" until the
    # exec chain reaches the daemon; wait for that so _pid_alive can check the name.
    for _ in $(seq 100); do
        _pid_alive "$name" && return 0
        kill -0 "$pid" 2>/dev/null || _fail "$name exited at startup"
        sleep 0.05
    done
    _fail "$name (pid $pid) did not exec within 5 s"
}

_mariadb_ping() {
    mariadb --no-defaults --socket="$STATE/mysql/mysqld.sock" -u root -e 'SELECT 1'
}

_start_mariadb() {
    _pid_alive mariadbd && return 0
    if [ ! -d "$STATE/mysql/data/mysql" ]; then
        _log "initialising MariaDB data dir"
        mariadb-install-db --no-defaults --user=mysql --datadir="$STATE/mysql/data" \
            --auth-root-authentication-method=socket --skip-test-db \
            >>"$STATE/log/mariadbd.log" 2>&1 || _fail "mariadb-install-db failed"
    fi
    _log "starting mariadbd"
    # Socket only (skip-networking); small buffers: the accounting DB holds a few hundred
    # rows. mariadbd drops to the mysql user, so its own PID file lives in a dir it owns.
    _spawn mariadbd mariadbd --no-defaults --user=mysql \
        --datadir="$STATE/mysql/data" --socket="$STATE/mysql/mysqld.sock" \
        --pid-file="$STATE/mysql/mariadbd.pid" --log-error="$STATE/log/mariadbd.log" \
        --skip-networking --innodb-buffer-pool-size=32M --innodb-log-file-size=16M \
        --performance-schema=OFF
    _wait_for mariadbd "MariaDB on $STATE/mysql/mysqld.sock" _mariadb_ping
}

_munge_ping() {
    munge -n -S "$STATE/munge/run/munge.socket" | unmunge -S "$STATE/munge/run/munge.socket"
}

_start_munged() {
    _pid_alive munged && return 0
    _log "starting munged"
    # munged must run as the munge user, which owns the key (it refuses any other key
    # owner); setpriv execs, so the PID we record is munged's own.
    _spawn munged setpriv --reuid=munge --regid=munge --init-groups munged --foreground \
        --socket="$STATE/munge/run/munge.socket" \
        --key-file="$STATE/munge/key/munge.key" \
        --seed-file="$STATE/munge/key/munged.seed" \
        --pid-file="$STATE/munge/run/munged.pid" \
        --log-file="$STATE/log/munged.log"
    _wait_for munged "munged on $STATE/munge/run/munge.socket" _munge_ping
}

_start_slurmdbd() {
    _pid_alive slurmdbd && [ "$CONFIG_CHANGED" = 0 ] && return 0
    _stop_daemon slurmdbd
    _log "starting slurmdbd"
    # slurmdbd finds slurmdbd.conf beside $SLURM_CONF (it has no -f option).
    _spawn slurmdbd env MYSQL_UNIX_PORT="$STATE/mysql/mysqld.sock" \
        slurmdbd -D
    _wait_for slurmdbd "slurmdbd (sacctmgr show cluster)" sacctmgr -n show cluster
}

_register_cluster() {
    if ! sacctmgr -n -P show cluster format=cluster | grep -qx "$CLUSTER"; then
        _log "registering cluster $CLUSTER in the accounting DB"
        sacctmgr -i add cluster "$CLUSTER" >/dev/null || _fail "sacctmgr add cluster $CLUSTER failed"
    fi
}

_ctld_up() { scontrol ping | grep -q UP; }

_start_slurmctld() {
    _pid_alive slurmctld && [ "$CONFIG_CHANGED" = 0 ] && return 0
    _stop_daemon slurmctld
    _log "starting slurmctld"
    _spawn slurmctld slurmctld -D -f "$SLURM_CONF"
    _wait_for slurmctld "slurmctld (scontrol ping)" _ctld_up
}

_start_slurmd() {
    _pid_alive slurmd && [ "$CONFIG_CHANGED" = 0 ] && return 0
    _stop_daemon slurmd
    _log "starting slurmd"
    _spawn slurmd slurmd -D -f "$SLURM_CONF"
}

# Used only to restart a daemon whose config changed; slurm/stop_cluster.sh is the way
# to stop the cluster.
_stop_daemon() {
    local name="$1" pid
    _pid_alive "$name" || return 0
    pid="$(tr -dc '0-9' <"$STATE/pids/$name.pid")"
    _log "restarting $name (config changed)"
    kill -TERM "$pid" 2>/dev/null || true
    # slurmctld saves its state on the way out; give it up to 15 s.
    for _ in $(seq 150); do _pid_alive "$name" || return 0; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    sleep 0.2
}

_node_state() { sinfo -h -n "$NODE" -o '%t' 2>/dev/null | head -n 1; }

# Up = responding and schedulable: idle, partly or fully used by jobs, or cleaning up
# after jobs that just ended (comp). A suffix (down*, idle~, drain...) means not up.
_node_up() { case "$(_node_state)" in idle|mix|alloc|comp|plnd) return 0 ;; *) return 1 ;; esac; }

_all_running() {
    local d
    for d in "${DAEMONS[@]}"; do _pid_alive "$d" || return 1; done
}

_wait_node_up() {
    local deadline=$((SECONDS + TIMEOUT_S)) state resumed=0
    until _node_up; do
        _pid_alive slurmd || _fail "slurmd exited before node $NODE came up"
        _pid_alive slurmctld || _fail "slurmctld exited before node $NODE came up"
        state="$(_node_state)"
        # A node left down/drained by an earlier run (e.g. slurmd killed mid-job) comes
        # back once slurmd has registered; resume it once rather than wait forever.
        case "$state" in
            down*|drain*|drng*|fail*)
                if [ "$resumed" = 0 ] && _pid_alive slurmd; then
                    scontrol update nodename="$NODE" state=resume >/dev/null 2>&1 && resumed=1
                fi ;;
        esac
        if [ "$SECONDS" -ge "$deadline" ]; then
            _fail "node $NODE not up after ${TIMEOUT_S}s (sinfo state: '${state:-none}'; reason: $(sinfo -h -n "$NODE" -o '%E' 2>/dev/null))"
        fi
        sleep 0.2
    done
}

main() {
    [ "$(id -u)" = 0 ] || _die "start_cluster.sh must run as root (it installs packages and starts daemons)"
    _install_packages
    _make_state_dirs
    _write_configs
    if [ "$CONFIG_CHANGED" = 0 ] && _all_running && _node_up; then
        _log "cluster $CLUSTER already up: node $NODE $(_node_state), partition $PARTITION"
        return 0
    fi
    _start_mariadb
    _start_munged
    _start_slurmdbd
    _register_cluster
    _start_slurmctld
    _start_slurmd
    _wait_node_up
    _log "cluster $CLUSTER up: node $NODE $(_node_state), partition $PARTITION (state in $STATE, config $SLURM_CONF)"
}

main "$@"
