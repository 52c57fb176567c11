/*
 * native._append: the Python entry point of the append path (lk_segment_append), a plain
 * CPython extension like native._crc32c and for the same reason: a cffi call with seven
 * arguments costs several hundred nanoseconds of argument conversion, and reading the
 * answer back out of the struct as much again, which is a tenth of appending a 16 KiB
 * batch to the page cache. This module holds no append code and no state of its own
 * beyond the function pointer: native/__init__.py hands it the address of
 * lk_segment_append from the cffi module once (bind), so the append stays in one place
 * (native/append.c), and passes the addresses of the cffi-allocated structs it owns.
 * Like any Python function it raises on bad arguments (TypeError, OverflowError,
 * BufferError); the C below it never does.
 *
 * Thread-safety: as lk_segment_append (distinct segments and structs per thread); the
 * GIL is released around the call, which writes to the file.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#include "fastpath.h"

typedef int64_t (*lk_append_fn)(struct lk_segment *s, const uint8_t *buf, size_t len,
                                struct lk_append *a, int32_t leader_epoch, int assign_offsets,
                                int verify_crc);

/* Set once by bind() at import, before any append; read-only afterwards. */
static lk_append_fn lk_append;

/* append(segment, result, data, leader_epoch, assign_offsets, verify_crc, /): segment and
 * result are the addresses of a struct lk_segment and a struct lk_append. Returns the
 * leading out fields of *result as a tuple (first_offset, last_offset, records,
 * append_max_timestamp, log_append_time, position, bytes_written, status, epoch_runs,
 * first_epoch), or the negative errno (an int) when the call failed. */
static PyObject *lk_py_append(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    struct lk_segment *s;
    struct lk_append *a;
    long epoch;
    int assign, verify;
    int64_t rc;
    Py_buffer view;
    PyObject *data, *out;

    if (nargs != 6) {
        PyErr_Format(PyExc_TypeError, "append() takes 6 arguments, got %zd", nargs);
        return NULL;
    }
    if (lk_append == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "native._append used before bind()");
        return NULL;
    }
    s = PyLong_AsVoidPtr(args[0]);
    if (s == NULL)
        goto null_address;
    a = PyLong_AsVoidPtr(args[1]);
    if (a == NULL)
        goto null_address;
    epoch = PyLong_AsLong(args[3]);
    if (epoch == -1 && PyErr_Occurred())
        return NULL;
    if (epoch < INT32_MIN || epoch > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "leader_epoch must fit in 32 bits");
        return NULL;
    }
    assign = PyObject_IsTrue(args[4]);
    verify = PyObject_IsTrue(args[5]);
    if (assign < 0 || verify < 0)
        return NULL;
    data = args[2];
    if (PyBytes_CheckExact(data)) {
        const uint8_t *buf = (const uint8_t *)PyBytes_AS_STRING(data);
        size_t len = (size_t)PyBytes_GET_SIZE(data);
        Py_BEGIN_ALLOW_THREADS
        rc = lk_append(s, buf, len, a, (int32_t)epoch, assign, verify);
        Py_END_ALLOW_THREADS
    } else {
        if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0)
            return NULL;
        Py_BEGIN_ALLOW_THREADS
        rc = lk_append(s, view.buf, (size_t)view.len, a, (int32_t)epoch, assign, verify);
        Py_END_ALLOW_THREADS
        PyBuffer_Release(&view);
    }
    if (rc < 0)
        return PyLong_FromLongLong(rc);
    out = PyTuple_New(10);
    if (out == NULL)
        return NULL;
    {
        const long long fields[10] = {
            a->first_offset, a->last_offset, a->records, a->append_max_timestamp,
            a->log_append_time, a->position, a->bytes_written, a->status, a->epoch_runs,
            a->first_epoch,
        };
        for (int i = 0; i < 10; i++) {
            PyObject *v = PyLong_FromLongLong(fields[i]);
            if (v == NULL) {
                Py_DECREF(out);
                return NULL;
            }
            PyTuple_SET_ITEM(out, i, v);
        }
    }
    return out;

null_address:
    if (!PyErr_Occurred())
        PyErr_SetString(PyExc_ValueError, "append() needs struct addresses, not 0");
    return NULL;
}

/* holds_compressed(data, /): whether any batch of data (magic 2, or an old magic 0/1
 * message) is compressed, from the headers alone: the codec bits of a batch's int16
 * attributes (low byte at 22) or of a message's attributes byte (17). A torn tail or a
 * length of 0 or less ends the walk (the append refuses those). Log.append asks this
 * before every leader's append, to send compressed batches through its checks first: in
 * Python the walk cost more than half a microsecond an append. */
static PyObject *lk_py_holds_compressed(PyObject *mod, PyObject *data)
{
    Py_buffer view;
    if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const uint8_t *buf = view.buf;
    size_t n = (size_t)view.len, pos = 0;
    int found = 0;
    while (pos + 23 <= n) {
        size_t at = pos + (buf[pos + 16] >= 2 ? 22 : 17);
        if (buf[at] & 0x07) {
            found = 1;
            break;
        }
        int32_t length = (int32_t)((uint32_t)buf[pos + 8] << 24 | (uint32_t)buf[pos + 9] << 16 |
                                   (uint32_t)buf[pos + 10] << 8 | buf[pos + 11]);
        if (length <= 0)
            break;
        pos += 12 + (size_t)length;
    }
    PyBuffer_Release(&view);
    return PyBool_FromLong(found);
}

static PyObject *lk_py_bind(PyObject *mod, PyObject *address)
{
    void *fn = PyLong_AsVoidPtr(address);
    if (fn == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError,
                            "bind() needs the address of lk_segment_append, not 0");
        return NULL;
    }
    lk_append = (lk_append_fn)fn;
    Py_RETURN_NONE;
}

static PyMethodDef lk_methods[] = {
    {"append", (PyCFunction)(void (*)(void))lk_py_append, METH_FASTCALL,
     "append(segment, result, data, leader_epoch, assign_offsets, verify_crc, /):\n"
     "lk_segment_append on the structs at those addresses (see native/append_py.c)."},
    {"holds_compressed", lk_py_holds_compressed, METH_O,
     "holds_compressed(data, /): whether any batch of data is compressed (headers only)."},
    {"bind", lk_py_bind, METH_O,
     "bind(address): the lk_segment_append to call (native/__init__.py)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef lk_module = {
    PyModuleDef_HEAD_INIT, "native._append",
    "The append path's Python entry point; see native/append_py.c.", -1, lk_methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__append(void)
{
    return PyModule_Create(&lk_module);
}
