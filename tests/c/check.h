/* Tiny assertion helpers shared by the C tests: each failure prints
 * file:line (and the error's code and message) and exits 1. */
#ifndef TTPU_TEST_CHECK_H
#define TTPU_TEST_CHECK_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "torchtpu.h"

#define CHECK(cond)                                                          \
    do {                                                                     \
        if (!(cond)) {                                                       \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, \
                    #cond);                                                  \
            exit(1);                                                         \
        }                                                                    \
    } while (0)

/* `err` must be NULL (success). */
#define CHECK_OK(err)                                                           \
    do {                                                                        \
        ttpu_error_t *e_ = (err);                                               \
        if (e_ != NULL) {                                                       \
            fprintf(stderr, "%s:%d: %s failed: code %d: %s\n", __FILE__,        \
                    __LINE__, #err, (int)ttpu_error_code(e_),                   \
                    ttpu_error_message(e_));                                    \
            ttpu_error_destroy(e_);                                             \
            exit(1);                                                            \
        }                                                                       \
    } while (0)

/* `err` must be an error with code `code`; the error is freed. */
#define CHECK_CODE(err, code)                                                   \
    do {                                                                        \
        ttpu_error_t *e_ = (err);                                               \
        if (e_ == NULL) {                                                       \
            fprintf(stderr, "%s:%d: %s succeeded, expected code %d\n",          \
                    __FILE__, __LINE__, #err, (int)(code));                     \
            exit(1);                                                            \
        }                                                                       \
        if ((int)ttpu_error_code(e_) != (int)(code)) {                          \
            fprintf(stderr, "%s:%d: %s: code %d, expected %d: %s\n", __FILE__,  \
                    __LINE__, #err, (int)ttpu_error_code(e_), (int)(code),      \
                    ttpu_error_message(e_));                                    \
            ttpu_error_destroy(e_);                                             \
            exit(1);                                                            \
        }                                                                       \
        ttpu_error_destroy(e_);                                                 \
    } while (0)

/* Like CHECK_CODE, and the message must contain `needle`. */
#define CHECK_CODE_MSG(err, code, needle)                                       \
    do {                                                                        \
        ttpu_error_t *e2_ = (err);                                              \
        if (e2_ != NULL && strstr(ttpu_error_message(e2_), (needle)) == NULL) { \
            fprintf(stderr, "%s:%d: %s: message lacks \"%s\": %s\n", __FILE__,  \
                    __LINE__, #err, (needle), ttpu_error_message(e2_));         \
            ttpu_error_destroy(e2_);                                            \
            exit(1);                                                            \
        }                                                                       \
        CHECK_CODE(e2_, code);                                                  \
    } while (0)

static inline ttpu_runtime_t *test_runtime(void) {
    ttpu_runtime_t *rt = NULL;
    CHECK_OK(ttpu_runtime_create(NULL, &rt));
    CHECK(rt != NULL);
    return rt;
}

/* A float32 tensor on device 0 from `data` of shape sizes[0..ndim]. */
static inline ttpu_tensor_t *test_f32(ttpu_runtime_t *rt, const float *data,
                                      const int64_t *sizes, size_t ndim) {
    size_t n = 1;
    for (size_t i = 0; i < ndim; i++) n *= (size_t)sizes[i];
    ttpu_tensor_t *t = NULL;
    CHECK_OK(ttpu_tensor_from_host(rt, data, n * sizeof(float), TTPU_DTYPE_FLOAT32,
                                   sizes, ndim, 0, &t));
    return t;
}

static inline ttpu_value_t test_tensor_arg(const ttpu_tensor_t *t) {
    ttpu_value_t v = {TTPU_VALUE_KIND_TENSOR, 0, 0.0, t, 0};
    return v;
}

/* Checks that `t` holds exactly the float32 values want[0..n]. */
#define CHECK_F32(rt, t, want, n)                                            \
    do {                                                                     \
        float got_[64];                                                      \
        CHECK((n) <= 64);                                                    \
        CHECK_OK(ttpu_tensor_to_host((rt), (t), got_, (n) * sizeof(float))); \
        for (size_t i_ = 0; i_ < (size_t)(n); i_++) {                        \
            if (got_[i_] != (want)[i_]) {                                    \
                fprintf(stderr, "%s:%d: element %zu: got %g, want %g\n",     \
                        __FILE__, __LINE__, i_, (double)got_[i_],            \
                        (double)(want)[i_]);                                 \
                exit(1);                                                     \
            }                                                                \
        }                                                                    \
    } while (0)

#endif
