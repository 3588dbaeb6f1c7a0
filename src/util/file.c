/* file.c — mmap and bounded reads; every failure names the path. */
#define _GNU_SOURCE
#include "util/file.h"

#include "util/alloc.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

hr_status hr_file_map(const char *path, hr_mapped_file *out, hr_error *err) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return hr_err_set(err, HR_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return hr_err_set(err, HR_ERR_IO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return hr_err_set(err, HR_ERR_IO, "%s: not a regular file", path);
    }
    size_t size = (size_t)st.st_size;
    const uint8_t *data = NULL;
    if (size > 0) {
        void *p = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            int e = errno;
            close(fd);
            return hr_err_set(err, HR_ERR_IO, "%s: cannot mmap %zu bytes: %s", path, size,
                              strerror(e));
        }
        data = p;
    }
    close(fd); /* the mapping keeps the file alive */
    char *p = hr_strdup(path);
    if (!p) {
        if (data)
            munmap((void *)data, size);
        return hr_err_set(err, HR_ERR_NOMEM, "%s: out of memory", path);
    }
    out->data = data;
    out->size = size;
    out->path = p;
    return HR_OK;
}

void hr_file_unmap(hr_mapped_file *f) {
    if (!f)
        return;
    if (f->data && f->size)
        munmap((void *)f->data, f->size);
    hr_free(f->path);
    memset(f, 0, sizeof *f);
}

void hr_file_drop_pages(const void *p, size_t n_bytes) {
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    const uintptr_t lo = ((uintptr_t)p + page - 1) & ~(page - 1);
    const uintptr_t hi = ((uintptr_t)p + n_bytes) & ~(page - 1);
    /* MADV_DONTNEED on a private file mapping never written: the pages
     * come back from the file; failure only leaves them resident */
    if (hi > lo)
        (void)madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

hr_status hr_file_read_all(const char *path, size_t max_bytes, char **out, size_t *out_len,
                           hr_error *err) {
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return hr_err_set(err, HR_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    char *buf = NULL;
    size_t len = 0, cap = 0;
    hr_status s = HR_OK;
    for (;;) {
        if (len + 4096 + 1 > cap) {
            size_t ncap = cap ? cap * 2 : 65536;
            char *nb = hr_realloc(buf, ncap);
            if (!nb) {
                s = hr_err_set(err, HR_ERR_NOMEM, "%s: out of memory reading file", path);
                goto fail;
            }
            buf = nb;
            cap = ncap;
        }
        size_t got = fread(buf + len, 1, cap - len - 1, fp);
        len += got;
        if (len > max_bytes) {
            s = hr_err_set(err, HR_ERR_FORMAT, "%s: larger than the %zu bytes allowed", path,
                           max_bytes);
            goto fail;
        }
        if (got == 0) {
            if (ferror(fp)) {
                s = hr_err_set(err, HR_ERR_IO, "%s: read error", path);
                goto fail;
            }
            break;
        }
    }
    fclose(fp);
    buf[len] = '\0';
    *out = buf;
    if (out_len)
        *out_len = len;
    return HR_OK;
fail:
    fclose(fp);
    hr_free(buf);
    return s;
}

bool hr_path_is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

bool hr_path_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

bool hr_path_join(char *buf, size_t cap, const char *dir, const char *name) {
    size_t dl = strlen(dir);
    while (dl > 1 && dir[dl - 1] == '/')
        dl--;
    int n = snprintf(buf, cap, "%.*s/%s", (int)dl, dir, name);
    return n >= 0 && (size_t)n < cap;
}

bool hr_path_has_suffix(const char *path, const char *suffix) {
    size_t pl = strlen(path), sl = strlen(suffix);
    return pl >= sl && strcasecmp(path + pl - sl, suffix) == 0;
}
