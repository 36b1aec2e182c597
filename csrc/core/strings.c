/* strings.c -- a GGUF string array (u64 length, then that many bytes, `count` times) walked in one
 * pass, for files/gguf_file.py: a vocabulary is 50k-260k strings, and a Python loop over them was
 * the largest part of parsing a model's header. The caller decodes `out` (the strings joined by NUL
 * bytes) as UTF-8 in one call and splits it; where that cannot be exact (a string holds a NUL byte)
 * it says so, and the caller takes its per-string loop, which also names any bad element.
 */
#include <string.h>

#include "core/li.h"

int64_t li_string_array(const uint8_t *buf, int64_t size, int64_t pos, int64_t count, int64_t max_len,
                        uint8_t *out, int64_t *n_out, int32_t *has_nul) {
    const int64_t cap = out ? *n_out : 0;
    int64_t total = 0;
    *has_nul = 0;
    for (int64_t i = 0; i < count; i++) {
        if (pos < 0 || size - pos < 8) return -(i + 1);
        uint64_t n;
        memcpy(&n, buf + pos, 8);   /* GGUF is little-endian, as every target here */
        pos += 8;
        if (n > (uint64_t)max_len || (uint64_t)(size - pos) < n) return -(i + 1);
        if (out) {
            if ((i ? 1 : 0) + (int64_t)n > cap - total) return -(i + 1);   /* the buffer changed under us */
            if (i) out[total++] = 0;
            memcpy(out + total, buf + pos, (size_t)n);
            if (!*has_nul && memchr(buf + pos, 0, (size_t)n)) *has_nul = 1;
        } else if (i) {
            total++;
        }
        total += (int64_t)n;
        pos += (int64_t)n;
    }
    *n_out = total;
    return pos;
}
