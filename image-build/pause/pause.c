/* The pod sandbox ("pause") container's process, the project's own: it holds the pod's
 * namespaces open, reaps the zombies of a pod that shares its PID namespace, and exits on
 * SIGINT or SIGTERM. What kubernetes/build/pause/linux/pause.c does, written for this
 * project's air-gapped images (image-build/k8s-images); static, no shell, no libraries. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_stop(int sig) {
    (void)sig;
    _exit(0);
}

static void on_child(int sig) {
    (void)sig;
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "-v") == 0) {
        puts("nodeagent pause 1.0");
        return 0;
    }
    if (getpid() != 1) {
        fprintf(stderr, "pause: warning: not PID 1\n");
    }
    struct sigaction stop = {.sa_handler = on_stop};
    struct sigaction child = {.sa_handler = on_child, .sa_flags = SA_NOCLDSTOP};
    if (sigaction(SIGINT, &stop, NULL) < 0 || sigaction(SIGTERM, &stop, NULL) < 0 ||
        sigaction(SIGCHLD, &child, NULL) < 0) {
        fprintf(stderr, "pause: sigaction: %s\n", strerror(errno));
        return 1;
    }
    for (;;) {
        pause();
    }
}
