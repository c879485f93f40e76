/* The plain driver of a fuzz target: runs each input file given on the
 * command line (or every file of each directory given) through the
 * target's LLVMFuzzerTestOneInput, each in a child process of its own, and
 * prints TAP: an input that makes the target crash, abort (a failed check,
 * a sanitizer's report) or hang is "not ok".  Without arguments it runs
 * the target's corpus, $DSEC_SRCDIR/tests/fuzz/corpus/FUZZ_TARGET/.
 *
 * It is built with the ordinary compiler (with ASan and UBSan when that
 * compiler has them), so `make check` replays every corpus, crashes found
 * earlier included, on machines without clang.  See tests/fuzz/README. */
#include <config.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef FUZZ_TARGET
#error "FUZZ_TARGET names the target (its corpus directory)"
#endif

/* an input that takes longer than this is a hang */
#define INPUT_SECONDS 30
#define INPUT_MAX (64 * 1024 * 1024)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
__attribute__((weak)) int LLVMFuzzerInitialize(int *argc, char ***argv);

struct inputs {
  char **path;
  size_t n, cap;
};

static void add(struct inputs *in, char *path)
{
  if (in->n == in->cap) {
    in->cap = in->cap ? 2 * in->cap : 64;
    in->path = realloc(in->path, in->cap * sizeof *in->path);
    if (!in->path)
      abort();
  }
  in->path[in->n++] = path;
}

/* path, or the files of directory path in name order (dot files left out) */
static int collect(struct inputs *in, const char *path)
{
  struct dirent **names;
  struct stat st;
  int n;

  if (stat(path, &st) < 0) {
    printf("Bail out! cannot read %s: %s\n", path, strerror(errno));
    return -1;
  }
  if (!S_ISDIR(st.st_mode)) {
    add(in, strdup(path));
    return 0;
  }
  n = scandir(path, &names, NULL, alphasort);
  if (n < 0) {
    printf("Bail out! cannot list %s: %s\n", path, strerror(errno));
    return -1;
  }
  for (int i = 0; i < n; i++) {
    char *p;
    if (names[i]->d_name[0] != '.' &&
        asprintf(&p, "%s/%s", path, names[i]->d_name) >= 0) {
      if (stat(p, &st) == 0 && S_ISREG(st.st_mode))
        add(in, p);
      else
        free(p);
    }
    free(names[i]);
  }
  free(names);
  return 0;
}

static int read_input(const char *path, uint8_t **data, size_t *size)
{
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  struct stat st;
  size_t n = 0;

  if (fd < 0 || fstat(fd, &st) < 0 || st.st_size > INPUT_MAX) {
    if (fd >= 0)
      close(fd);
    return -1;
  }
  /* exactly the input's size, so that a read past its end is caught */
  *data = malloc(st.st_size ? (size_t) st.st_size : 1);
  if (!*data)
    abort();
  while (n < (size_t) st.st_size) {
    ssize_t r = read(fd, *data + n, (size_t) st.st_size - n);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0) {
      close(fd);
      free(*data);
      return -1;
    }
    n += (size_t) r;
  }
  close(fd);
  *size = n;
  return 0;
}

int main(int argc, char **argv)
{
  struct inputs in = { 0 };
  int failed = 0;

  if (LLVMFuzzerInitialize)
    LLVMFuzzerInitialize(&argc, &argv);
  if (argc < 2) {
    const char *src = getenv("DSEC_SRCDIR");
    char *dir;
    if (asprintf(&dir, "%s/tests/fuzz/corpus/%s", src ? src : ".",
                 FUZZ_TARGET) < 0 ||
        collect(&in, dir) < 0)
      return 1;
    free(dir);
  }
  for (int i = 1; i < argc; i++)
    if (collect(&in, argv[i]) < 0)
      return 1;
  if (in.n == 0) {
    printf("Bail out! no inputs for %s\n", FUZZ_TARGET);
    return 1;
  }
  printf("1..%zu\n", in.n);
  fflush(stdout);
  for (size_t i = 0; i < in.n; i++) {
    uint8_t *data;
    size_t size;
    pid_t pid;
    int st;
    if (read_input(in.path[i], &data, &size) < 0) {
      printf("not ok %zu - %s: cannot read it\n", i + 1, in.path[i]);
      failed++;
      free(in.path[i]);
      continue;
    }
    pid = fork();
    if (pid < 0) {
      printf("Bail out! cannot fork: %s\n", strerror(errno));
      return 1;
    }
    if (pid == 0) {
      alarm(INPUT_SECONDS);
      LLVMFuzzerTestOneInput(data, size);
      free(data);
      exit(0);
    }
    free(data);
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
      ;
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {
      printf("ok %zu - %s\n", i + 1, in.path[i]);
    } else {
      failed++;
      if (WIFSIGNALED(st))
        printf("not ok %zu - %s: %s\n", i + 1, in.path[i],
               WTERMSIG(st) == SIGALRM ? "hangs" : strsignal(WTERMSIG(st)));
      else
        printf("not ok %zu - %s: exit status %d\n", i + 1, in.path[i],
               WEXITSTATUS(st));
    }
    fflush(stdout);
    free(in.path[i]);
  }
  free(in.path);
  return failed ? 1 : 0;
}
