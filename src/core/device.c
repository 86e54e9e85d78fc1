/*
 * device.c: discover every OpenCL platform and device and read the
 * properties that matter for training (count-then-fill, so a missing ICD or
 * an empty platform is "no devices", never a crash).
 */
#include "core/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Vendor queries for the PCI address (values from the Khronos registry). */
#define CLT_DEVICE_PCI_BUS_INFO_KHR 0x410F
#define CLT_DEVICE_PCI_BUS_ID_NV 0x4008
#define CLT_DEVICE_PCI_SLOT_ID_NV 0x4009
#define CLT_DEVICE_PCI_DOMAIN_ID_NV 0x400A
#define CLT_DEVICE_TOPOLOGY_AMD 0x4037

const char *clt__cl_error_name(cl_int err) {
  switch (err) {
#define E(x) case x: return #x;
    E(CL_SUCCESS) E(CL_DEVICE_NOT_FOUND) E(CL_DEVICE_NOT_AVAILABLE)
    E(CL_COMPILER_NOT_AVAILABLE) E(CL_MEM_OBJECT_ALLOCATION_FAILURE)
    E(CL_OUT_OF_RESOURCES) E(CL_OUT_OF_HOST_MEMORY) E(CL_PROFILING_INFO_NOT_AVAILABLE)
    E(CL_MEM_COPY_OVERLAP) E(CL_IMAGE_FORMAT_MISMATCH) E(CL_IMAGE_FORMAT_NOT_SUPPORTED)
    E(CL_BUILD_PROGRAM_FAILURE) E(CL_MAP_FAILURE) E(CL_MISALIGNED_SUB_BUFFER_OFFSET)
    E(CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST) E(CL_COMPILE_PROGRAM_FAILURE)
    E(CL_LINKER_NOT_AVAILABLE) E(CL_LINK_PROGRAM_FAILURE) E(CL_DEVICE_PARTITION_FAILED)
    E(CL_KERNEL_ARG_INFO_NOT_AVAILABLE) E(CL_INVALID_VALUE) E(CL_INVALID_DEVICE_TYPE)
    E(CL_INVALID_PLATFORM) E(CL_INVALID_DEVICE) E(CL_INVALID_CONTEXT)
    E(CL_INVALID_QUEUE_PROPERTIES) E(CL_INVALID_COMMAND_QUEUE) E(CL_INVALID_HOST_PTR)
    E(CL_INVALID_MEM_OBJECT) E(CL_INVALID_IMAGE_FORMAT_DESCRIPTOR) E(CL_INVALID_IMAGE_SIZE)
    E(CL_INVALID_SAMPLER) E(CL_INVALID_BINARY) E(CL_INVALID_BUILD_OPTIONS)
    E(CL_INVALID_PROGRAM) E(CL_INVALID_PROGRAM_EXECUTABLE) E(CL_INVALID_KERNEL_NAME)
    E(CL_INVALID_KERNEL_DEFINITION) E(CL_INVALID_KERNEL) E(CL_INVALID_ARG_INDEX)
    E(CL_INVALID_ARG_VALUE) E(CL_INVALID_ARG_SIZE) E(CL_INVALID_KERNEL_ARGS)
    E(CL_INVALID_WORK_DIMENSION) E(CL_INVALID_WORK_GROUP_SIZE) E(CL_INVALID_WORK_ITEM_SIZE)
    E(CL_INVALID_GLOBAL_OFFSET) E(CL_INVALID_EVENT_WAIT_LIST) E(CL_INVALID_EVENT)
    E(CL_INVALID_OPERATION) E(CL_INVALID_GL_OBJECT) E(CL_INVALID_BUFFER_SIZE)
    E(CL_INVALID_MIP_LEVEL) E(CL_INVALID_GLOBAL_WORK_SIZE) E(CL_INVALID_PROPERTY)
#undef E
  case -1001: return "CL_PLATFORM_NOT_FOUND_KHR";
  }
  return "unknown OpenCL error";
}

int clt__cl_status(cl_int err) {
  switch (err) {
  case CL_MEM_OBJECT_ALLOCATION_FAILURE:
  case CL_OUT_OF_RESOURCES:
  case CL_INVALID_BUFFER_SIZE:
    return CLT_EDEVMEM;
  case CL_OUT_OF_HOST_MEMORY:
    return CLT_ENOMEM;
  case CL_BUILD_PROGRAM_FAILURE:
    return CLT_EBUILD;
  }
  return CLT_ECL;
}

/* Read a string property, cut to fit; "" when the query fails. */
static void device_string(cl_device_id dev, cl_device_info what, char *dst, size_t len) {
  size_t size = 0;
  dst[0] = '\0';
  if (clGetDeviceInfo(dev, what, 0, NULL, &size) != CL_SUCCESS || size == 0) return;
  char *tmp = malloc(size + 1);
  if (!tmp) return;
  if (clGetDeviceInfo(dev, what, size, tmp, NULL) == CL_SUCCESS) {
    tmp[size] = '\0';
    clt__strlcpy(dst, tmp, len);
  }
  free(tmp);
}

static void platform_string(cl_platform_id p, cl_platform_info what, char *dst, size_t len) {
  size_t size = 0;
  dst[0] = '\0';
  if (clGetPlatformInfo(p, what, 0, NULL, &size) != CL_SUCCESS || size == 0) return;
  char *tmp = malloc(size + 1);
  if (!tmp) return;
  if (clGetPlatformInfo(p, what, size, tmp, NULL) == CL_SUCCESS) {
    tmp[size] = '\0';
    clt__strlcpy(dst, tmp, len);
  }
  free(tmp);
}

/* Is `ext` a whole word of the device's extension list? */
static int has_extension(const char *extensions, const char *ext) {
  size_t n = strlen(ext);
  for (const char *p = strstr(extensions, ext); p; p = strstr(p + 1, ext)) {
    int starts = p == extensions || p[-1] == ' ';
    int ends = p[n] == '\0' || p[n] == ' ';
    if (starts && ends) return 1;
  }
  return 0;
}

static void read_pci_bus_id(cl_device_id dev, const char *extensions, char *dst, size_t len) {
  dst[0] = '\0';
  if (has_extension(extensions, "cl_khr_pci_bus_info")) {
    struct { cl_uint domain, bus, device, function; } pci;
    if (clGetDeviceInfo(dev, CLT_DEVICE_PCI_BUS_INFO_KHR, sizeof pci, &pci, NULL) == CL_SUCCESS) {
      snprintf(dst, len, "%04x:%02x:%02x.%x", pci.domain, pci.bus, pci.device, pci.function);
      return;
    }
  }
  if (has_extension(extensions, "cl_nv_device_attribute_query")) {
    cl_uint bus = 0, slot = 0, domain = 0;
    if (clGetDeviceInfo(dev, CLT_DEVICE_PCI_BUS_ID_NV, sizeof bus, &bus, NULL) == CL_SUCCESS &&
        clGetDeviceInfo(dev, CLT_DEVICE_PCI_SLOT_ID_NV, sizeof slot, &slot, NULL) == CL_SUCCESS) {
      clGetDeviceInfo(dev, CLT_DEVICE_PCI_DOMAIN_ID_NV, sizeof domain, &domain, NULL);
      snprintf(dst, len, "%04x:%02x:%02x.%x", domain, bus, slot >> 3, slot & 7);
      return;
    }
  }
  if (has_extension(extensions, "cl_amd_device_attribute_query")) {
    union { struct { cl_uint type; cl_uint data[5]; } raw;
            struct { cl_uint type; cl_char unused[17]; cl_char bus, device, function; } pcie; } topo;
    if (clGetDeviceInfo(dev, CLT_DEVICE_TOPOLOGY_AMD, sizeof topo, &topo, NULL) == CL_SUCCESS &&
        topo.raw.type == 1 /* CL_DEVICE_TOPOLOGY_TYPE_PCIE_AMD */) {
      snprintf(dst, len, "0000:%02x:%02x.%x", (unsigned char)topo.pcie.bus,
               (unsigned char)topo.pcie.device, (unsigned char)topo.pcie.function);
    }
  }
}

static void read_device_info(cl_platform_id plat, cl_device_id dev, clt_device_info *info) {
  cl_device_type type = 0;
  cl_uint u = 0;
  cl_ulong ul = 0;
  size_t sz = 0;
  cl_bool b = CL_FALSE;
  cl_device_fp_config fp = 0;

  device_string(dev, CL_DEVICE_NAME, info->name, sizeof info->name);
  device_string(dev, CL_DEVICE_VENDOR, info->vendor, sizeof info->vendor);
  device_string(dev, CL_DRIVER_VERSION, info->driver_version, sizeof info->driver_version);
  device_string(dev, CL_DEVICE_VERSION, info->device_version, sizeof info->device_version);
  device_string(dev, CL_DEVICE_OPENCL_C_VERSION, info->opencl_c_version, sizeof info->opencl_c_version);
  platform_string(plat, CL_PLATFORM_NAME, info->platform_name, sizeof info->platform_name);
  platform_string(plat, CL_PLATFORM_VENDOR, info->platform_vendor, sizeof info->platform_vendor);

  if (sscanf(info->opencl_c_version, "OpenCL C %d.%d", &info->opencl_c_major, &info->opencl_c_minor) != 2)
    info->opencl_c_major = 1, info->opencl_c_minor = 0;

  clGetDeviceInfo(dev, CL_DEVICE_TYPE, sizeof type, &type, NULL);
  info->type = (type & CL_DEVICE_TYPE_GPU)           ? CLT_DEVICE_GPU
               : (type & CL_DEVICE_TYPE_CPU)         ? CLT_DEVICE_CPU
               : (type & CL_DEVICE_TYPE_ACCELERATOR) ? CLT_DEVICE_ACCELERATOR
                                                     : CLT_DEVICE_OTHER;
  if (clGetDeviceInfo(dev, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof u, &u, NULL) == CL_SUCCESS)
    info->compute_units = u;
  if (clGetDeviceInfo(dev, CL_DEVICE_MAX_CLOCK_FREQUENCY, sizeof u, &u, NULL) == CL_SUCCESS)
    info->clock_mhz = u;
  if (clGetDeviceInfo(dev, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof ul, &ul, NULL) == CL_SUCCESS)
    info->global_mem_bytes = ul;
  if (clGetDeviceInfo(dev, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof ul, &ul, NULL) == CL_SUCCESS)
    info->max_alloc_bytes = ul;
  if (clGetDeviceInfo(dev, CL_DEVICE_LOCAL_MEM_SIZE, sizeof ul, &ul, NULL) == CL_SUCCESS)
    info->local_mem_bytes = ul;
  if (clGetDeviceInfo(dev, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof sz, &sz, NULL) == CL_SUCCESS)
    info->max_work_group_size = sz;
  if (clGetDeviceInfo(dev, CL_DEVICE_HOST_UNIFIED_MEMORY, sizeof b, &b, NULL) == CL_SUCCESS)
    info->unified_memory = b == CL_TRUE;

  char *ext = NULL;
  if (clGetDeviceInfo(dev, CL_DEVICE_EXTENSIONS, 0, NULL, &sz) == CL_SUCCESS && (ext = malloc(sz + 1))) {
    if (clGetDeviceInfo(dev, CL_DEVICE_EXTENSIONS, sz, ext, NULL) != CL_SUCCESS) sz = 0;
    ext[sz] = '\0';
    info->fp16 = has_extension(ext, "cl_khr_fp16");
    info->fp64 = has_extension(ext, "cl_khr_fp64");
    read_pci_bus_id(dev, ext, info->pci_bus_id, sizeof info->pci_bus_id);
    free(ext);
  }
  if (!info->fp64 && clGetDeviceInfo(dev, CL_DEVICE_DOUBLE_FP_CONFIG, sizeof fp, &fp, NULL) == CL_SUCCESS)
    info->fp64 = fp != 0;
  if (clGetDeviceInfo(dev, CL_DEVICE_SINGLE_FP_CONFIG, sizeof fp, &fp, NULL) == CL_SUCCESS)
    info->fp32_exact_div_sqrt = (fp & CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT) != 0;
}

int clt_devices_discover(clt_devices **out) {
  int rc = CLT_OK;
  cl_uint nplat = 0;
  cl_platform_id *plats = NULL;
  clt_devices *devs = NULL;

  CLT_ARG(out);
  *out = NULL;
  cl_int err = clGetPlatformIDs(0, NULL, &nplat);
  if (err == -1001 /* CL_PLATFORM_NOT_FOUND_KHR */ || (err == CL_SUCCESS && nplat == 0)) {
    /* Where the loader looked: OCL_ICD_VENDORS replaces the directory (ocl-icd
     * and Khronos' loader alike), OCL_ICD_FILENAMES names drivers besides. */
    const char *vendors = getenv("OCL_ICD_VENDORS"), *files = getenv("OCL_ICD_FILENAMES");
    int own_dir = vendors && *vendors;
    return clt__error(CLT_ENOICD,
                      "no OpenCL platform found: the ICD loader sees no driver in %s%s%s%s%s (install one, e.g. "
                      "pocl-opencl-icd for the CPU, or your GPU vendor's OpenCL driver%s)",
                      own_dir ? vendors : "/etc/OpenCL/vendors", own_dir ? " (OCL_ICD_VENDORS)" : "",
                      files && *files ? " nor in OCL_ICD_FILENAMES='" : "", files && *files ? files : "",
                      files && *files ? "'" : "", own_dir ? ", or unset OCL_ICD_VENDORS" : "");
  }
  CLT_CL_TRY(err);

  plats = clt__calloc(nplat, sizeof *plats);
  devs = clt__calloc(1, sizeof *devs);
  if (!plats || !devs) { rc = CLT_ENOMEM; goto fail; }
  CLT_CL_TRY(clGetPlatformIDs(nplat, plats, NULL));

  for (cl_uint p = 0; p < nplat; p++) {
    cl_uint ndev = 0;
    err = clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, 0, NULL, &ndev);
    if (err == CL_DEVICE_NOT_FOUND || ndev == 0) continue;
    if (err != CL_SUCCESS) {
      char name[128];
      platform_string(plats[p], CL_PLATFORM_NAME, name, sizeof name);
      clt__log(CLT_LOG_WARN, "platform %u (%s): listing devices failed with %s; skipping it", p, name,
               clt__cl_error_name(err));
      continue;
    }
    cl_device_id *ids = clt__calloc(ndev, sizeof *ids);
    struct clt_device_entry *grown = realloc(devs->entries, (devs->count + ndev) * sizeof *grown);
    if (!ids || !grown) {
      free(ids);
      rc = clt__error(CLT_ENOMEM, "out of host memory listing OpenCL devices");
      goto fail;
    }
    devs->entries = grown;
    err = clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, ndev, ids, NULL);
    if (err != CL_SUCCESS) ndev = 0;
    for (cl_uint d = 0; d < ndev; d++) {
      struct clt_device_entry *e = &devs->entries[devs->count];
      memset(e, 0, sizeof *e);
      e->platform = plats[p];
      e->device = ids[d];
      read_device_info(plats[p], ids[d], &e->info);
      e->info.index = devs->count;
      e->info.platform_index = (int)p;
      e->info.device_index = (int)d;
      devs->count++;
    }
    free(ids);
  }
  free(plats);
  *out = devs;
  return CLT_OK;

fail:
  free(plats);
  clt_devices_destroy(devs);
  return rc;
}

void clt_devices_destroy(clt_devices *devs) {
  if (!devs) return;
  free(devs->entries);
  free(devs);
}

int clt_devices_count(const clt_devices *devs) { return devs ? devs->count : 0; }

const clt_device_info *clt_devices_info(const clt_devices *devs, int i) {
  if (!devs || i < 0 || i >= devs->count) return NULL;
  return &devs->entries[i].info;
}

cl_platform_id clt_devices_cl_platform(const clt_devices *devs, int i) {
  if (!devs || i < 0 || i >= devs->count) return NULL;
  return devs->entries[i].platform;
}

cl_device_id clt_devices_cl_device(const clt_devices *devs, int i) {
  if (!devs || i < 0 || i >= devs->count) return NULL;
  return devs->entries[i].device;
}

const char *clt_device_type_name(clt_device_type type) {
  switch (type) {
  case CLT_DEVICE_CPU: return "cpu";
  case CLT_DEVICE_GPU: return "gpu";
  case CLT_DEVICE_ACCELERATOR: return "accelerator";
  case CLT_DEVICE_OTHER: return "other";
  }
  return "other";
}
