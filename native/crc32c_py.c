/*
 * native._crc32c: the Python entry point of CRC-32C, a plain CPython extension.
 *
 * Why not cffi like the rest: a cffi call costs about 200 ns (argument conversion and a
 * GIL release around every call), twice a METH_FASTCALL function's; at 1 KiB that alone
 * lost to the crc32c package, whose CRC is slower. This module holds no CRC code and no
 * state of its own: native/__init__.py hands it the address of lk_crc32c from the cffi
 * module once (bind), so the dispatch, its calibration and crc32c_force stay in one
 * place. Like any Python function it raises on bad arguments (TypeError, OverflowError,
 * BufferError); the C below it never does.
 *
 * Thread-safety: crc32c may be called from any thread. Buffers of LK_NOGIL_MIN bytes and
 * more are checksummed without the GIL (their buffer must not be resized meanwhile, which
 * the buffer protocol's export already forbids); below that the GIL round trip would cost
 * more than the CRC.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#define LK_NOGIL_MIN (16 << 10)

typedef uint32_t (*lk_crc_fn)(uint32_t crc, const uint8_t *buf, size_t len);

/* Set once by bind() at import, before any crc32c call; read-only afterwards. */
static lk_crc_fn lk_crc;

static uint32_t lk_run(uint32_t crc, const void *buf, Py_ssize_t len)
{
    uint32_t out;
    if (len < LK_NOGIL_MIN)
        return lk_crc(crc, buf, (size_t)len);
    Py_BEGIN_ALLOW_THREADS
    out = lk_crc(crc, buf, (size_t)len);
    Py_END_ALLOW_THREADS
    return out;
}

static PyObject *lk_py_crc32c(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    uint32_t crc = 0;
    if (nargs < 1 || nargs > 2) {
        PyErr_Format(PyExc_TypeError, "crc32c(data, crc=0, /) takes 1 or 2 arguments, got %zd",
                     nargs);
        return NULL;
    }
    if (lk_crc == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "native._crc32c used before bind()");
        return NULL;
    }
    if (nargs == 2) {
        unsigned long v = PyLong_AsUnsignedLong(args[1]);
        if (v == (unsigned long)-1 && PyErr_Occurred())
            return NULL;
        if (v > 0xffffffffUL) {
            PyErr_SetString(PyExc_OverflowError, "crc must be in 0..2**32-1");
            return NULL;
        }
        crc = (uint32_t)v;
    }
    PyObject *data = args[0];
    if (PyBytes_CheckExact(data))
        return PyLong_FromUnsignedLong(
            lk_run(crc, PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data)));
    Py_buffer view;
    if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    crc = lk_run(crc, view.buf, view.len);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(crc);
}

static PyObject *lk_py_bind(PyObject *mod, PyObject *address)
{
    void *fn = PyLong_AsVoidPtr(address);
    if (fn == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "bind() needs the address of lk_crc32c, not 0");
        return NULL;
    }
    lk_crc = (lk_crc_fn)fn;
    Py_RETURN_NONE;
}

static PyMethodDef lk_methods[] = {
    {"crc32c", (PyCFunction)(void (*)(void))lk_py_crc32c, METH_FASTCALL,
     "crc32c(data, crc=0, /): CRC-32C of data (bytes or any contiguous buffer) continuing\n"
     "from crc, as the crc32c package computes it: crc32c(b, crc32c(a)) == crc32c(a + b).\n"
     "Uses the implementation the dispatch chose (native.crc32c_active)."},
    {"bind", lk_py_bind, METH_O, "bind(address): the lk_crc32c to call (native/__init__.py)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef lk_module = {
    PyModuleDef_HEAD_INIT, "native._crc32c",
    "CRC-32C's Python entry point; see native/crc32c_py.c.", -1, lk_methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__crc32c(void)
{
    return PyModule_Create(&lk_module);
}
