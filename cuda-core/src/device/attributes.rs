//! Typed accessors for every `CUdevice_attribute`.

#![forbid(unsafe_code)]

use super::Device;
use crate::error::Result;
use cuhost_driver_sys as sys;

macro_rules! attributes {
    ($( $fn:ident : $attr:ident => $ty:ident; )*) => {
        impl Device {
            $(
                attributes!(@one $fn, $attr, $ty);
            )*
        }
    };
    (@one $fn:ident, $attr:ident, bool) => {
        #[doc = concat!(
            "Whether the device reports `", stringify!($attr), "` as nonzero ",
            "([`cuDeviceGetAttribute`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__DEVICE.html)).\n\n",
            "Fails as [`Device::attribute`] does: with the driver's status when it does not know ",
            "the attribute (a driver older than the headers) or the device.",
        )]
        pub fn $fn(&self) -> Result<bool> {
            Ok(self.attribute(sys::CUdevice_attribute::$attr)? != 0)
        }
    };
    (@one $fn:ident, $attr:ident, i32) => {
        #[doc = concat!(
            "The value of `", stringify!($attr), "` ",
            "([`cuDeviceGetAttribute`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__DEVICE.html)).\n\n",
            "Fails as [`Device::attribute`] does: with the driver's status when it does not know ",
            "the attribute (a driver older than the headers) or the device.",
        )]
        pub fn $fn(&self) -> Result<i32> {
            self.attribute(sys::CUdevice_attribute::$attr)
        }
    };
}

attributes! {
    max_threads_per_block: CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK => i32;
    max_block_dim_x: CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X => i32;
    max_block_dim_y: CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y => i32;
    max_block_dim_z: CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z => i32;
    max_grid_dim_x: CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X => i32;
    max_grid_dim_y: CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y => i32;
    max_grid_dim_z: CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z => i32;
    max_shared_memory_per_block: CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK => i32;
    total_constant_memory: CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY => i32;
    warp_size: CU_DEVICE_ATTRIBUTE_WARP_SIZE => i32;
    max_pitch: CU_DEVICE_ATTRIBUTE_MAX_PITCH => i32;
    max_registers_per_block: CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK => i32;
    clock_rate: CU_DEVICE_ATTRIBUTE_CLOCK_RATE => i32;
    texture_alignment: CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT => i32;
    gpu_overlap: CU_DEVICE_ATTRIBUTE_GPU_OVERLAP => bool;
    multiprocessor_count: CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT => i32;
    kernel_exec_timeout: CU_DEVICE_ATTRIBUTE_KERNEL_EXEC_TIMEOUT => bool;
    integrated: CU_DEVICE_ATTRIBUTE_INTEGRATED => bool;
    can_map_host_memory: CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY => bool;
    compute_mode: CU_DEVICE_ATTRIBUTE_COMPUTE_MODE => i32;
    maximum_texture1d_width: CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_WIDTH => i32;
    maximum_texture2d_width: CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_WIDTH => i32;
    maximum_texture2d_height: CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_HEIGHT => i32;
    maximum_texture3d_width: CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_WIDTH => i32;
    maximum_texture3d_height: CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_HEIGHT => i32;
    maximum_texture3d_depth: CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_DEPTH => i32;
    maximum_texture2d_layered_width: CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_WIDTH => i32;
    maximum_texture2d_layered_height: CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_HEIGHT => i32;
    maximum_texture2d_layered_layers: CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_LAYERS => i32;
    surface_alignment: CU_DEVICE_ATTRIBUTE_SURFACE_ALIGNMENT => i32;
    concurrent_kernels: CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS => bool;
    ecc_enabled: CU_DEVICE_ATTRIBUTE_ECC_ENABLED => bool;
    pci_bus_number: CU_DEVICE_ATTRIBUTE_PCI_BUS_ID => i32;
    pci_device_id: CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID => i32;
    tcc_driver: CU_DEVICE_ATTRIBUTE_TCC_DRIVER => bool;
    memory_clock_rate: CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE => i32;
    global_memory_bus_width: CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH => i32;
    l2_cache_size: CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE => i32;
    max_threads_per_multiprocessor: CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR => i32;
    async_engine_count: CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT => i32;
    unified_addressing: CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING => bool;
    maximum_texture1d_layered_width: CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LAYERED_WIDTH => i32;
    maximum_texture1d_layered_layers: CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LAYERED_LAYERS => i32;
    can_tex2d_gather: CU_DEVICE_ATTRIBUTE_CAN_TEX2D_GATHER => bool;
    maximum_texture2d_gather_width: CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_GATHER_WIDTH => i32;
    maximum_texture2d_gather_height: CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_GATHER_HEIGHT => i32;
    maximum_texture3d_width_alternate: CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_WIDTH_ALTERNATE => i32;
    maximum_texture3d_height_alternate: CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_HEIGHT_ALTERNATE => i32;
    maximum_texture3d_depth_alternate: CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_DEPTH_ALTERNATE => i32;
    pci_domain_id: CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID => i32;
    texture_pitch_alignment: CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT => i32;
    maximum_texturecubemap_width: CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_WIDTH => i32;
    maximum_texturecubemap_layered_width: CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_LAYERED_WIDTH => i32;
    maximum_texturecubemap_layered_layers: CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_LAYERED_LAYERS => i32;
    maximum_surface1d_width: CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE1D_WIDTH => i32;
    maximum_surface2d_width: CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_WIDTH => i32;
    maximum_surface2d_height: CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_HEIGHT => i32;
    maximum_surface3d_width: CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE3D_WIDTH => i32;
    maximum_surface3d_height: CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE3D_HEIGHT => i32;
    maximum_surface3d_depth: CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE3D_DEPTH => i32;
    maximum_surface1d_layered_width: CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE1D_LAYERED_WIDTH => i32;
    maximum_surface1d_layered_layers: CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE1D_LAYERED_LAYERS => i32;
    maximum_surface2d_layered_width: CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_LAYERED_WIDTH => i32;
    maximum_surface2d_layered_height: CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_LAYERED_HEIGHT => i32;
    maximum_surface2d_layered_layers: CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_LAYERED_LAYERS => i32;
    maximum_surfacecubemap_width: CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACECUBEMAP_WIDTH => i32;
    maximum_surfacecubemap_layered_width: CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACECUBEMAP_LAYERED_WIDTH => i32;
    maximum_surfacecubemap_layered_layers: CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACECUBEMAP_LAYERED_LAYERS => i32;
    maximum_texture1d_linear_width: CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LINEAR_WIDTH => i32;
    maximum_texture2d_linear_width: CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LINEAR_WIDTH => i32;
    maximum_texture2d_linear_height: CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LINEAR_HEIGHT => i32;
    maximum_texture2d_linear_pitch: CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LINEAR_PITCH => i32;
    maximum_texture2d_mipmapped_width: CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_MIPMAPPED_WIDTH => i32;
    maximum_texture2d_mipmapped_height: CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_MIPMAPPED_HEIGHT => i32;
    compute_capability_major: CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR => i32;
    compute_capability_minor: CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR => i32;
    maximum_texture1d_mipmapped_width: CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_MIPMAPPED_WIDTH => i32;
    stream_priorities_supported: CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED => bool;
    global_l1_cache_supported: CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED => bool;
    local_l1_cache_supported: CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED => bool;
    max_shared_memory_per_multiprocessor: CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR => i32;
    max_registers_per_multiprocessor: CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR => i32;
    managed_memory: CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY => bool;
    multi_gpu_board: CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD => bool;
    multi_gpu_board_group_id: CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD_GROUP_ID => i32;
    host_native_atomic_supported: CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED => bool;
    single_to_double_precision_perf_ratio: CU_DEVICE_ATTRIBUTE_SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO => i32;
    pageable_memory_access: CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS => bool;
    concurrent_managed_access: CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS => bool;
    compute_preemption_supported: CU_DEVICE_ATTRIBUTE_COMPUTE_PREEMPTION_SUPPORTED => bool;
    can_use_host_pointer_for_registered_mem: CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM => bool;
    can_use_stream_mem_ops_v1: CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1 => bool;
    can_use_64_bit_stream_mem_ops_v1: CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS_V1 => bool;
    can_use_stream_wait_value_nor_v1: CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR_V1 => bool;
    cooperative_launch: CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH => bool;
    cooperative_multi_device_launch: CU_DEVICE_ATTRIBUTE_COOPERATIVE_MULTI_DEVICE_LAUNCH => bool;
    max_shared_memory_per_block_optin: CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN => i32;
    can_flush_remote_writes: CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES => bool;
    host_register_supported: CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED => bool;
    pageable_memory_access_uses_host_page_tables: CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES => bool;
    direct_managed_mem_access_from_host: CU_DEVICE_ATTRIBUTE_DIRECT_MANAGED_MEM_ACCESS_FROM_HOST => bool;
    virtual_address_management_supported: CU_DEVICE_ATTRIBUTE_VIRTUAL_ADDRESS_MANAGEMENT_SUPPORTED => bool;
    handle_type_posix_file_descriptor_supported: CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED => bool;
    handle_type_win32_handle_supported: CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_WIN32_HANDLE_SUPPORTED => bool;
    handle_type_win32_kmt_handle_supported: CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_WIN32_KMT_HANDLE_SUPPORTED => bool;
    max_blocks_per_multiprocessor: CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR => i32;
    generic_compression_supported: CU_DEVICE_ATTRIBUTE_GENERIC_COMPRESSION_SUPPORTED => bool;
    max_persisting_l2_cache_size: CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE => i32;
    max_access_policy_window_size: CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE => i32;
    gpu_direct_rdma_with_cuda_vmm_supported: CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED => bool;
    reserved_shared_memory_per_block: CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK => i32;
    sparse_cuda_array_supported: CU_DEVICE_ATTRIBUTE_SPARSE_CUDA_ARRAY_SUPPORTED => bool;
    read_only_host_register_supported: CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED => bool;
    timeline_semaphore_interop_supported: CU_DEVICE_ATTRIBUTE_TIMELINE_SEMAPHORE_INTEROP_SUPPORTED => bool;
    memory_pools_supported: CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED => bool;
    gpu_direct_rdma_supported: CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED => bool;
    gpu_direct_rdma_flush_writes_options: CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS => i32;
    gpu_direct_rdma_writes_ordering: CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING => i32;
    mempool_supported_handle_types: CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES => bool;
    cluster_launch: CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH => bool;
    deferred_mapping_cuda_array_supported: CU_DEVICE_ATTRIBUTE_DEFERRED_MAPPING_CUDA_ARRAY_SUPPORTED => bool;
    can_use_64_bit_stream_mem_ops: CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS => bool;
    can_use_stream_wait_value_nor: CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR => bool;
    dma_buf_supported: CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED => bool;
    ipc_event_supported: CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED => bool;
    mem_sync_domain_count: CU_DEVICE_ATTRIBUTE_MEM_SYNC_DOMAIN_COUNT => i32;
    tensor_map_access_supported: CU_DEVICE_ATTRIBUTE_TENSOR_MAP_ACCESS_SUPPORTED => bool;
    handle_type_fabric_supported: CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED => bool;
    unified_function_pointers: CU_DEVICE_ATTRIBUTE_UNIFIED_FUNCTION_POINTERS => bool;
    numa_config: CU_DEVICE_ATTRIBUTE_NUMA_CONFIG => i32;
    numa_id: CU_DEVICE_ATTRIBUTE_NUMA_ID => i32;
    multicast_supported: CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED => bool;
    mps_enabled: CU_DEVICE_ATTRIBUTE_MPS_ENABLED => bool;
    host_numa_id: CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID => i32;
    d3d12_cig_supported: CU_DEVICE_ATTRIBUTE_D3D12_CIG_SUPPORTED => bool;
    mem_decompress_algorithm_mask: CU_DEVICE_ATTRIBUTE_MEM_DECOMPRESS_ALGORITHM_MASK => i32;
    mem_decompress_maximum_length: CU_DEVICE_ATTRIBUTE_MEM_DECOMPRESS_MAXIMUM_LENGTH => i32;
    vulkan_cig_supported: CU_DEVICE_ATTRIBUTE_VULKAN_CIG_SUPPORTED => bool;
    gpu_pci_device_id: CU_DEVICE_ATTRIBUTE_GPU_PCI_DEVICE_ID => i32;
    gpu_pci_subsystem_id: CU_DEVICE_ATTRIBUTE_GPU_PCI_SUBSYSTEM_ID => i32;
    host_numa_virtual_memory_management_supported: CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED => bool;
    host_numa_memory_pools_supported: CU_DEVICE_ATTRIBUTE_HOST_NUMA_MEMORY_POOLS_SUPPORTED => bool;
    host_numa_multinode_ipc_supported: CU_DEVICE_ATTRIBUTE_HOST_NUMA_MULTINODE_IPC_SUPPORTED => bool;
    host_memory_pools_supported: CU_DEVICE_ATTRIBUTE_HOST_MEMORY_POOLS_SUPPORTED => bool;
    host_virtual_memory_management_supported: CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED => bool;
    host_alloc_dma_buf_supported: CU_DEVICE_ATTRIBUTE_HOST_ALLOC_DMA_BUF_SUPPORTED => bool;
    only_partial_host_native_atomic_supported: CU_DEVICE_ATTRIBUTE_ONLY_PARTIAL_HOST_NATIVE_ATOMIC_SUPPORTED => bool;
}
