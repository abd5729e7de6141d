/* replayhost: the simulated host of the fan-out benchmark, answering from recorded probe outputs.
 *
 * sshd runs it as every login's ForceCommand (bench/replayhost.py writes that config), so a host costs
 * sshd's login and this small program instead of sshd's login and a python3 running the probe:
 *
 *   - `python3 [options] -` (probe run, the OpenSSH fan-out, pssh): reads the whole script from stdin and
 *     answers with what the real python3 printed for the same options and script bytes;
 *   - any other command (Ansible's `echo ~`, mkdir, chmod, rm) runs in /bin/sh as sshd would run it, with
 *     FP_REPLAY_SHIM first on PATH: its `python3` is this program, so Ansible's `python3 /tmp/.../host.py`
 *     (the script module) is answered from the recording of that file's bytes;
 *   - the sftp subsystem (`internal-sftp` or a path ending in sftp-server) execs the real sftp-server;
 *   - `python3 -c ...` and anything else without a script to key on runs the real python3.
 *
 * Recordings live in FP_REPLAY_DIR/<key>.out, key = FNV-1a 64 of the options and the script bytes.  A
 * script without a recording is run once by the real python3 (FP_REPLAY_PYTHON, default /usr/bin/python3)
 * and its stdout and exit status are stored, with this login's $SSH_CONNECTION replaced by a placeholder
 * that every replay fills with its own login's value (the `host` probe reports it).  Only stdout and the
 * exit status are replayed; the host probe writes nothing else that a tool reads.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static const char PLACE[] = "@@FP_SSH_CONNECTION@@";
static const char SFTP[] = "/usr/lib/openssh/sftp-server";

struct buf {
    char *p;
    size_t n, cap;
};

static void put(struct buf *b, const char *p, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        b->cap = (b->n + n + 1) * 2;
        b->p = realloc(b->p, b->cap);
        if (!b->p) {
            perror("replayhost: realloc");
            exit(70);
        }
    }
    memcpy(b->p + b->n, p, n);
    b->n += n;
    b->p[b->n] = 0;
}

static int drain(int fd, struct buf *b)
{
    char tmp[65536];
    for (;;) {
        ssize_t r = read(fd, tmp, sizeof tmp);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -1;
        if (r == 0)
            return 0;
        put(b, tmp, (size_t)r);
    }
}

static int slurp(const char *path, struct buf *b)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int rc = drain(fd, b);
    close(fd);
    return rc;
}

static void write_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return; /* the reader went away: nothing left to tell it */
        p += w;
        n -= (size_t)w;
    }
}

static uint64_t fnv(uint64_t h, const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)p[i];
        h *= 1099511628211ULL;
    }
    return h;
}

/* `src` with every `from` replaced by `to`, into `out`. */
static void replace(const struct buf *src, const char *from, const char *to, struct buf *out)
{
    size_t fl = strlen(from), tl = strlen(to), i = 0;
    while (i < src->n) {
        char *hit = fl ? memmem(src->p + i, src->n - i, from, fl) : NULL;
        size_t upto = hit ? (size_t)(hit - src->p) : src->n;
        put(out, src->p + i, upto - i);
        if (!hit)
            break;
        put(out, to, tl);
        i = upto + fl;
    }
}

static const char *real_python(void)
{
    const char *py = getenv("FP_REPLAY_PYTHON");
    return py && *py ? py : "/usr/bin/python3";
}

/* Run the real python3 with `argv` (stdin: the script when `script` is set), store its stdout and
 * exit status under `path`, pass both on. */
static int record(char **argv, const struct buf *script, const char *path)
{
    int out[2];
    if (pipe(out) < 0) {
        perror("replayhost: pipe");
        return 70;
    }
    pid_t pid = fork();
    if (pid < 0) {
        perror("replayhost: fork");
        return 70;
    }
    if (pid == 0) {
        if (script) { /* the script as a file on stdin: no pipe to deadlock on */
            FILE *f = tmpfile();
            if (!f || fwrite(script->p, 1, script->n, f) != script->n || fflush(f) || fseek(f, 0, SEEK_SET))
                _exit(70);
            dup2(fileno(f), 0);
        }
        dup2(out[1], 1);
        close(out[0]);
        close(out[1]);
        argv[0] = (char *)real_python();
        execv(argv[0], argv);
        perror("replayhost: exec python3");
        _exit(127);
    }
    close(out[1]);
    struct buf got = {0}, stored = {0};
    drain(out[0], &got);
    close(out[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    int rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    char head[64];
    snprintf(head, sizeof head, "FPREPLAY %d\n", rc);
    put(&stored, head, strlen(head));
    const char *conn = getenv("SSH_CONNECTION");
    struct buf body = {0};
    replace(&got, conn && *conn ? conn : PLACE, PLACE, &body);
    if (body.n)
        put(&stored, body.p, body.n);
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd >= 0) {
        write_all(fd, stored.p, stored.n);
        close(fd);
        rename(tmp, path); /* atomic: a concurrent login reads the old file or the whole new one */
    }
    write_all(1, got.p, got.n);
    return rc;
}

/* Answer `python3 ARGS...` (argv[0] is python3): from the recording of its options and script. */
static int python_main(int argc, char **argv)
{
    const char *dir = getenv("FP_REPLAY_DIR");
    const char *last = argc > 1 ? argv[argc - 1] : NULL;
    int inline_code = 0; /* `python3 -c CODE` / `-m MODULE`: no script to key on */
    for (int i = 1; i < argc; i++)
        inline_code |= strcmp(argv[i], "-c") == 0 || strcmp(argv[i], "-m") == 0;
    if (!dir || !last || inline_code || (last[0] == '-' && last[1] != 0)) { /* not replayed: the real python3 */
        argv[0] = (char *)real_python();
        execv(argv[0], argv);
        perror("replayhost: exec python3");
        return 127;
    }
    struct buf script = {0};
    int from_stdin = strcmp(last, "-") == 0;
    if ((from_stdin ? drain(0, &script) : slurp(last, &script)) < 0) {
        fprintf(stderr, "replayhost: cannot read the script %s: %s\n", last, strerror(errno));
        return 2;
    }
    uint64_t h = 1469598103934665603ULL;
    for (int i = 1; i < argc - 1; i++)
        h = fnv(h, argv[i], strlen(argv[i]) + 1);
    h = fnv(h, script.p ? script.p : "", script.n);
    char path[4096];
    snprintf(path, sizeof path, "%s/%016llx.out", dir, (unsigned long long)h);
    struct buf rec = {0};
    if (slurp(path, &rec) < 0 || rec.n < 10 || memcmp(rec.p, "FPREPLAY ", 9) != 0)
        return record(argv, from_stdin ? &script : NULL, path);
    char *nl = memchr(rec.p, '\n', rec.n);
    int rc = atoi(rec.p + 9);
    size_t off = nl ? (size_t)(nl - rec.p) + 1 : rec.n;
    struct buf body = {rec.p + off, rec.n - off, 0}, out = {0};
    const char *conn = getenv("SSH_CONNECTION");
    replace(&body, PLACE, conn ? conn : "", &out);
    write_all(1, out.p ? out.p : "", out.n);
    return rc;
}

/* `python3 [-opts] -` with no shell syntax in it: answered here, without a shell. */
static int plain_python_stdin(const char *cmd, char **words, int *nw)
{
    if (strpbrk(cmd, "'\"$;&|<>`\\(){}*?~\t\n") != NULL)
        return 0;
    char *copy = strdup(cmd), *save = NULL;
    *nw = 0;
    for (char *w = strtok_r(copy, " ", &save); w && *nw < 62; w = strtok_r(NULL, " ", &save))
        words[(*nw)++] = w;
    words[*nw] = NULL;
    const char *base = *nw ? strrchr(words[0], '/') : NULL;
    base = base ? base + 1 : (*nw ? words[0] : "");
    return *nw >= 2 && strcmp(base, "python3") == 0 && strcmp(words[*nw - 1], "-") == 0;
}

int main(int argc, char **argv)
{
    const char *me = strrchr(argv[0], '/');
    me = me ? me + 1 : argv[0];
    if (strcmp(me, "python3") == 0) /* the shim on PATH of a shell command (Ansible's script module) */
        return python_main(argc, argv);
    const char *cmd = getenv("SSH_ORIGINAL_COMMAND");
    if (!cmd || !*cmd) {
        execl("/bin/sh", "sh", (char *)NULL);
        return 127;
    }
    size_t cl = strlen(cmd);
    if (strcmp(cmd, "internal-sftp") == 0 || (cl >= 11 && strcmp(cmd + cl - 11, "sftp-server") == 0)) {
        execl(SFTP, "sftp-server", (char *)NULL);
        perror("replayhost: exec sftp-server");
        return 127;
    }
    char *words[64];
    int nw = 0;
    if (plain_python_stdin(cmd, words, &nw))
        return python_main(nw, words);
    const char *shim = getenv("FP_REPLAY_SHIM"), *path = getenv("PATH");
    if (shim && *shim) {
        char *np = NULL;
        if (asprintf(&np, "%s:%s", shim, path ? path : "/usr/bin:/bin") > 0)
            setenv("PATH", np, 1);
    }
    execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
    perror("replayhost: exec /bin/sh");
    return 127;
}
