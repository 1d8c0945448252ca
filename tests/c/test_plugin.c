/* The plugin area: the example plugins dropped into TORCHTPU_PLUGIN_PATH
 * (run.sh points it at the directory scripts/setup.sh builds them into)
 * load with the first runtime; their ops run through the generic op call in
 * strict and fused mode against values computed here; a plugin policy is
 * selected by name; bad paths and files give errors naming them, and every
 * rejected file is listed with its reason. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"

/* rms_norm over rows of d elements, in double. */
static void rms_norm_ref(const float *x, const float *w, size_t rows, size_t d, double eps, float *out) {
    for (size_t r = 0; r < rows; r++) {
        double ms = 0;
        for (size_t j = 0; j < d; j++) ms += (double)x[r * d + j] * x[r * d + j];
        double inv = 1.0 / sqrt(ms / (double)d + eps);
        for (size_t j = 0; j < d; j++) out[r * d + j] = (float)(x[r * d + j] * inv * w[j]);
    }
}

static void check_close(ttpu_runtime_t *rt, const ttpu_tensor_t *t, const float *want, size_t n) {
    float got[64];
    CHECK(n <= 64);
    CHECK_OK(ttpu_tensor_to_host(rt, t, got, n * sizeof(float)));
    for (size_t i = 0; i < n; i++) {
        if (fabs((double)got[i] - want[i]) > 1e-5 * (1 + fabs((double)want[i]))) {
            fprintf(stderr, "element %zu: got %g, want %g\n", i, (double)got[i], (double)want[i]);
            exit(1);
        }
    }
}

/* y = rms_norm(x, w, eps) through ttpu_op_call. */
static ttpu_tensor_t *rms_norm(ttpu_runtime_t *rt, ttpu_tensor_t *x, ttpu_tensor_t *w, double eps) {
    ttpu_value_t args[3] = {test_tensor_arg(x), test_tensor_arg(w), {TTPU_VALUE_KIND_DOUBLE, 0, eps, NULL, 0}};
    ttpu_value_t out[1];
    size_t n = 0;
    CHECK_OK(ttpu_op_call(rt, "rms_norm::rms_norm", args, 3, out, 1, &n));
    CHECK(n == 1 && out[0].kind == TTPU_VALUE_KIND_TENSOR);
    return (ttpu_tensor_t *)out[0].ptr;
}

int main(void) {
    const char *dir = getenv("TORCHTPU_PLUGIN_PATH");
    CHECK(dir != NULL && *dir != '\0');
    CHECK(ttpu_plugin_count() == 0);
    CHECK(ttpu_plugin_rejection_count() == 0);
    ttpu_runtime_t *rt = test_runtime();

    /* The three examples were loaded from TORCHTPU_PLUGIN_PATH. */
    CHECK(ttpu_plugin_count() == 3);
    int seen = 0;
    for (size_t i = 0; i < ttpu_plugin_count(); i++) {
        ttpu_plugin_info_t info;
        memset(&info, 0, sizeof info);
        info.struct_size = sizeof info;
        CHECK_OK(ttpu_plugin_info(i, &info));
        CHECK(info.abi_major == TTPU_PLUGIN_ABI_MAJOR && info.abi_minor <= TTPU_PLUGIN_ABI_MINOR);
        CHECK(strstr(info.path, dir) == info.path);
        if (strcmp(info.name, "rms_norm") == 0) {
            ttpu_plugin_op_t op;
            memset(&op, 0, sizeof op);
            op.struct_size = sizeof op;
            CHECK(info.num_ops == 1 && info.num_policies == 0);
            CHECK_OK(ttpu_plugin_op(i, 0, &op));
            CHECK(strcmp(op.name, "rms_norm::rms_norm") == 0 && op.backward == NULL);
            CHECK(strstr(op.schema, "float eps=") != NULL);
            CHECK_CODE(ttpu_plugin_op(i, 1, &op), TTPU_CODE_INVALID_ARGUMENT);
            seen |= 1;
        } else if (strcmp(info.name, "swiglu") == 0) {
            ttpu_plugin_op_t op;
            memset(&op, 0, sizeof op);
            op.struct_size = sizeof op;
            CHECK_OK(ttpu_plugin_op(i, 0, &op));
            CHECK(op.backward != NULL && strcmp(op.backward, "swiglu::swiglu_backward") == 0);
            seen |= 2;
        } else if (strcmp(info.name, "byte_budget") == 0) {
            const char *name = NULL;
            CHECK(info.num_policies == 1);
            CHECK_OK(ttpu_plugin_policy_name(i, 0, &name));
            CHECK(strcmp(name, "byte_budget::byte_budget") == 0);
            seen |= 4;
        }
    }
    CHECK(seen == 7);
    CHECK(ttpu_op_exists("rms_norm::rms_norm") && ttpu_op_exists("swiglu::swiglu_backward"));
    ttpu_plugin_info_t small;
    small.struct_size = 8;
    CHECK_CODE(ttpu_plugin_info(0, &small), TTPU_CODE_INVALID_ARGUMENT);
    CHECK_CODE(ttpu_plugin_info(99, NULL), TTPU_CODE_INVALID_ARGUMENT);

    /* The op in strict and in fused mode. */
    const float xs[8] = {1, -2, 3, 0.5f, -1, 4, 2, -3};
    const float ws[4] = {1, 0.5f, 2, -1};
    const int64_t xsz[2] = {2, 4}, wsz[1] = {4};
    float want[8];
    rms_norm_ref(xs, ws, 2, 4, 1e-5, want);
    ttpu_tensor_t *x = test_f32(rt, xs, xsz, 2), *w = test_f32(rt, ws, wsz, 1);
    for (int mode = 0; mode < 3; mode++) {
        CHECK_OK(ttpu_thread_set_mode(mode));
        ttpu_tensor_t *y = rms_norm(rt, x, w, 1e-5);
        check_close(rt, y, want, 8);
        ttpu_tensor_destroy(y);
    }
    ttpu_flush_info_t info;
    memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    CHECK_OK(ttpu_runtime_last_flush(rt, &info));
    CHECK(info.recorded == 1 && info.reason == TTPU_FLUSH_REASON_HOST_READ);

    /* A plugin's error names the plugin and the op; the runtime goes on. */
    ttpu_value_t bad[2] = {test_tensor_arg(w), test_tensor_arg(x)};
    ttpu_value_t out[1];
    size_t n = 0;
    CHECK_CODE_MSG(ttpu_op_call(rt, "rms_norm::rms_norm", bad, 2, out, 1, &n), TTPU_CODE_INVALID_ARGUMENT,
                   "plugin 'rms_norm' (op rms_norm::rms_norm)");
    ttpu_tensor_t *y = rms_norm(rt, x, w, 1e-5);
    check_close(rt, y, want, 8);
    ttpu_tensor_destroy(y);

    /* The plugin policy by name, with its config. */
    CHECK_OK(ttpu_runtime_set_fusion_policy(rt, "byte_budget::byte_budget?max_bytes=64"));
    y = rms_norm(rt, x, w, 1e-5); /* 32 result bytes: below the budget */
    size_t pending = 0;
    CHECK_OK(ttpu_runtime_pending_ops(rt, 0, &pending));
    CHECK(pending == 1);
    ttpu_tensor_t *y2 = rms_norm(rt, x, w, 1e-5); /* 64 bytes: the cut */
    CHECK_OK(ttpu_runtime_pending_ops(rt, 0, &pending));
    CHECK(pending == 0);
    CHECK_OK(ttpu_runtime_last_flush(rt, &info));
    CHECK(info.reason == TTPU_FLUSH_REASON_POLICY && info.recorded == 2);
    check_close(rt, y, want, 8);
    check_close(rt, y2, want, 8);
    ttpu_tensor_destroy(y);
    ttpu_tensor_destroy(y2);
    CHECK_CODE_MSG(ttpu_runtime_set_fusion_policy(rt, "nope::nothing"), TTPU_CODE_INVALID_ARGUMENT,
                   "byte_budget::byte_budget");
    CHECK_OK(ttpu_thread_set_mode(0));

    /* Bad paths and files. */
    CHECK_CODE(ttpu_plugin_load(NULL), TTPU_CODE_INVALID_ARGUMENT);
    CHECK_CODE_MSG(ttpu_plugin_load("/nonexistent/plugin.wasm"), TTPU_CODE_NOT_FOUND, "/nonexistent/plugin.wasm");
    char path[] = "/tmp/ttpu_test_plugin_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    CHECK(write(fd, "junk", 4) == 4);
    close(fd);
    CHECK_CODE_MSG(ttpu_plugin_load(path), TTPU_CODE_INVALID_ARGUMENT, path);
    unlink(path);

    /* Every rejected file is listed, with its reason. */
    CHECK(ttpu_plugin_rejection_count() == 1);
    ttpu_plugin_rejection_t rej;
    memset(&rej, 0, sizeof rej);
    rej.struct_size = sizeof rej;
    CHECK_OK(ttpu_plugin_rejection(0, &rej));
    CHECK(strcmp(rej.path, path) == 0);
    CHECK(strstr(rej.message, path) != NULL && strstr(rej.message, "not a WebAssembly module") != NULL);
    /* A FIFO named like a plugin, in a directory: reported, and the load
     * does not hang on it. */
    char fifo_dir[] = "/tmp/ttpu_test_plugin_dir_XXXXXX";
    CHECK(mkdtemp(fifo_dir) != NULL);
    char fifo[sizeof fifo_dir + 16];
    snprintf(fifo, sizeof fifo, "%s/x.wasm", fifo_dir);
    CHECK(mkfifo(fifo, 0600) == 0);
    CHECK_CODE_MSG(ttpu_plugin_load(fifo_dir), TTPU_CODE_INVALID_ARGUMENT, "is a FIFO, not a regular file");
    CHECK(ttpu_plugin_rejection_count() == 2);
    CHECK_OK(ttpu_plugin_rejection(1, &rej));
    CHECK(strcmp(rej.path, fifo) == 0 && strstr(rej.message, "is a FIFO") != NULL);
    unlink(fifo);
    rmdir(fifo_dir);
    /* The strings outlive the call that returned them. */
    CHECK(strstr(rej.message, "x.wasm") != NULL);
    CHECK_CODE(ttpu_plugin_rejection(2, &rej), TTPU_CODE_INVALID_ARGUMENT);
    CHECK_CODE(ttpu_plugin_rejection(0, NULL), TTPU_CODE_INVALID_ARGUMENT);
    ttpu_plugin_rejection_t small_rej = {sizeof(size_t), NULL, NULL};
    CHECK_CODE_MSG(ttpu_plugin_rejection(0, &small_rej), TTPU_CODE_INVALID_ARGUMENT, "struct_size");
    /* Loading the same directory again is a no-op. */
    CHECK_OK(ttpu_plugin_load(dir));
    CHECK(ttpu_plugin_count() == 3);

    ttpu_tensor_destroy(x);
    ttpu_tensor_destroy(w);
    ttpu_runtime_destroy(rt);
    printf("ok\n");
    return 0;
}
