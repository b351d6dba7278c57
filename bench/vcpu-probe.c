// vcpu-probe: how the guest's two vCPUs sit on the host, for reading a loopback
// benchmark round (docs/ARCHITECTURE.md, "Write and Send at 64 KiB against the
// busy-polling stream").
//
//   gcc -O2 -pthread -o /tmp/vcpu-probe bench/vcpu-probe.c && /tmp/vcpu-probe [SECONDS]
//
// Prints the round trip of one cache line between CPU 0 and CPU 1, and the rate of an
// ALU loop on CPU 0 while CPU 1 sleeps, spins with `pause`, or copies 1 MiB over and over.
// Two vCPUs on sibling hyperthreads of one host core show a short round trip and an ALU
// rate that falls when CPU 1 works; so does a host whose clock drops with the cores in
// use (turbo). Either makes a reader that spins cost its writer, and a blocking reader
// look faster. On separate cores at a fixed clock the rate does not move. Run it on a
// quiet machine (on a busy one CPU 1 "sleeps" into other work) between benchmark rounds.
#define _GNU_SOURCE
#include <immintrin.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { TRIPS = 200000, COPY = 1 << 20 };

static volatile int mode, stop;
static volatile long flag __attribute__((aligned(64)));
static char *src, *dst;

static void pin(int cpu) {
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    sched_setaffinity(0, sizeof s, &s);
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void *answer(void *unused) {
    (void)unused;
    pin(1);
    for (long i = 0; i < TRIPS; i++) {
        while (flag != 2 * i + 1) {
        }
        flag = 2 * i + 2;
    }
    return NULL;
}

static void *load(void *unused) {
    (void)unused;
    pin(1);
    while (!stop) {
        if (mode == 0)
            usleep(1000);
        else if (mode == 1)
            _mm_pause();
        else
            memcpy(dst, src, COPY);
    }
    return NULL;
}

// Millions of dependent multiply-adds a second on the calling CPU.
static double alu(double secs) {
    volatile unsigned long x = 1;
    long rounds = 0;
    double t0 = now(), e;
    do {
        for (int i = 0; i < 100000; i++)
            x = x * 6364136223846793005UL + 1442695040888963407UL;
        rounds++;
    } while ((e = now() - t0) < secs);
    return rounds * 1e5 / e / 1e6;
}

int main(int argc, char **argv) {
    double secs = argc > 1 ? atof(argv[1]) : 0.3;
    src = malloc(COPY);
    dst = malloc(COPY);
    memset(src, 1, COPY);
    memset(dst, 1, COPY);
    pthread_t t;
    pthread_create(&t, NULL, answer, NULL);
    pin(0);
    double t0 = now();
    for (long i = 0; i < TRIPS; i++) {
        flag = 2 * i + 1;
        while (flag != 2 * i + 2) {
        }
    }
    double trip_ns = (now() - t0) / TRIPS * 1e9;
    pthread_join(t, NULL);
    printf("round trip CPU0<->CPU1 %.0f ns;", trip_ns);
    const char *what[] = {"CPU1 sleeps", "CPU1 spins (pause)", "CPU1 copies 1 MiB"};
    pthread_create(&t, NULL, load, NULL);
    for (int m = 0; m < 3; m++) {
        mode = m;
        usleep(20000);
        printf(" %s: ALU %.0f M/s;", what[m], alu(secs));
    }
    stop = 1;
    pthread_join(t, NULL);
    printf("\n");
    return 0;
}
