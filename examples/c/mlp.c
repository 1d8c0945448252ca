/* A two-layer MLP forward pass through the torchtpu C ABI, checked against
 * the same arithmetic on the host. Plain C11, built against an installed
 * torchtpu with pkg-config:
 *
 *   export PKG_CONFIG_PATH=<prefix>/lib/pkgconfig
 *   cc -std=c11 mlp.c $(pkg-config --cflags --libs torchtpu) \
 *      -Wl,-rpath,$(pkg-config --variable=libdir torchtpu) -o mlp
 *   ./mlp
 *
 * y = relu(x W1 + b1) W2 + b2, with x [4, 3], W1 [3, 8], W2 [8, 2]. Exits 1
 * if any element differs from the host's by more than 1e-4. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <torchtpu.h>

enum { B = 4, IN = 3, HID = 8, OUT = 2 };

/* Prints the error and exits when `e` is not NULL. */
static void check(ttpu_error_t *e, const char *what) {
    if (e == NULL) return;
    fprintf(stderr, "%s: %s\n", what, ttpu_error_message(e));
    ttpu_error_destroy(e);
    exit(1);
}

/* A float32 tensor on device 0: a matrix [rows, cols], or a vector [rows]
 * when cols is 0. */
static ttpu_tensor_t *upload(ttpu_runtime_t *rt, const float *data, int64_t rows, int64_t cols) {
    const int64_t sizes[2] = {rows, cols};
    size_t ndim = cols == 0 ? 1 : 2;
    size_t bytes = (size_t)(rows * (cols == 0 ? 1 : cols)) * sizeof(float);
    ttpu_tensor_t *t = NULL;
    check(ttpu_tensor_from_host(rt, data, bytes, TTPU_DTYPE_FLOAT32, sizes, ndim, 0, &t), "ttpu_tensor_from_host");
    return t;
}

static ttpu_value_t tensor_arg(ttpu_tensor_t *t) {
    ttpu_value_t v = {TTPU_VALUE_KIND_TENSOR, 0, 0.0, t, 0};
    return v;
}

/* Calls `op` and returns its one tensor result, owned. */
static ttpu_tensor_t *call(ttpu_runtime_t *rt, const char *op, ttpu_value_t *args, size_t nargs) {
    ttpu_value_t out[1];
    size_t n = 0;
    check(ttpu_op_call(rt, op, args, nargs, out, 1, &n), op);
    ttpu_tensor_t *t = n == 1 ? ttpu_value_take_tensor(&out[0]) : NULL;
    if (t == NULL) {
        fprintf(stderr, "%s: expected one tensor result\n", op);
        exit(1);
    }
    return t;
}

int main(void) {
    float x[B * IN], w1[IN * HID], b1[HID], w2[HID * OUT], b2[OUT];
    for (int i = 0; i < B * IN; i++) x[i] = (float)(i % 7) * 0.25f - 0.75f;
    for (int i = 0; i < IN * HID; i++) w1[i] = (float)((i * 5) % 11) * 0.1f - 0.5f;
    for (int i = 0; i < HID; i++) b1[i] = (float)i * 0.05f - 0.2f;
    for (int i = 0; i < HID * OUT; i++) w2[i] = (float)((i * 3) % 7) * 0.2f - 0.6f;
    for (int i = 0; i < OUT; i++) b2[i] = 0.1f * (float)(i + 1);

    ttpu_runtime_t *rt = NULL;
    check(ttpu_runtime_create(NULL, &rt), "ttpu_runtime_create");
    printf("torchtpu %s on %s (plugin: %s)\n", ttpu_version(), ttpu_runtime_platform_name(rt),
           ttpu_runtime_plugin_source(rt));

    ttpu_tensor_t *tx = upload(rt, x, B, IN), *tw1 = upload(rt, w1, IN, HID), *tw2 = upload(rt, w2, HID, OUT);
    ttpu_tensor_t *tb1 = upload(rt, b1, HID, 0), *tb2 = upload(rt, b2, OUT, 0);
    /* addmm(bias, a, b) = bias + a @ b, as torch.addmm. */
    ttpu_value_t l1[3] = {tensor_arg(tb1), tensor_arg(tx), tensor_arg(tw1)};
    ttpu_tensor_t *h = call(rt, "aten::addmm", l1, 3);
    ttpu_value_t r[1] = {tensor_arg(h)};
    ttpu_tensor_t *hr = call(rt, "aten::relu", r, 1);
    ttpu_value_t l2[3] = {tensor_arg(tb2), tensor_arg(hr), tensor_arg(tw2)};
    ttpu_tensor_t *y = call(rt, "aten::addmm", l2, 3);
    float got[B * OUT];
    check(ttpu_tensor_to_host(rt, y, got, sizeof got), "ttpu_tensor_to_host");

    /* The same on the host. */
    float worst = 0.0f;
    for (int b = 0; b < B; b++) {
        float hid[HID];
        for (int j = 0; j < HID; j++) {
            float s = b1[j];
            for (int k = 0; k < IN; k++) s += x[b * IN + k] * w1[k * HID + j];
            hid[j] = s > 0.0f ? s : 0.0f;
        }
        for (int o = 0; o < OUT; o++) {
            float s = b2[o];
            for (int j = 0; j < HID; j++) s += hid[j] * w2[j * OUT + o];
            float d = fabsf(s - got[b * OUT + o]);
            if (d > worst) worst = d;
        }
    }
    printf("y[0] = (%.5f, %.5f); max |device - host| = %.2e\n", (double)got[0], (double)got[1], (double)worst);

    ttpu_tensor_t *all[] = {y, hr, h, tb2, tb1, tw2, tw1, tx};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) ttpu_tensor_destroy(all[i]);
    ttpu_runtime_destroy(rt);
    if (worst > 1e-4f) {
        fprintf(stderr, "mismatch: %g > 1e-4\n", (double)worst);
        return 1;
    }
    return 0;
}
