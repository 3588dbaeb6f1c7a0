/* host.c — facts about the host for reports: the CPU's name, resident memory. */
#include "engine/engine.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

const char *engine_cpu_name(void) {
    static char name[256];
    if (name[0])
        return name;
    snprintf(name, sizeof name, "unknown CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return name;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) != 0)
            continue;
        char *c = strchr(line, ':');
        if (c) {
            c++;
            while (*c == ' ')
                c++;
            c[strcspn(c, "\n")] = '\0';
            snprintf(name, sizeof name, "%s", c);
        }
        break;
    }
    fclose(f);
    return name;
}

uint64_t engine_host_rss(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f)
        return 0;
    unsigned long long size = 0, resident = 0;
    int n = fscanf(f, "%llu %llu", &size, &resident);
    fclose(f);
    long page = sysconf(_SC_PAGESIZE);
    return n == 2 && page > 0 ? (uint64_t)resident * (uint64_t)page : 0;
}
