//! The Vulkan side of the external memory and external semaphore interop tests: a headless
//! instance and device on the physical device that is a given CUDA device, exportable buffers,
//! images and semaphores (POSIX fds, `OPAQUE_FD`), and single submissions that wait on or signal
//! those semaphores around a copy through a host-visible staging buffer.
//!
//! Every object a [`Vulkan`] creates is recorded and destroyed when it drops, after the device is
//! idle; the `Shared*` handles are plain copies of the Vulkan handles.
#![allow(dead_code)]

use ash::vk;
use std::cell::{Cell, RefCell};
use std::ffi::CStr;
use std::os::fd::{FromRawFd, OwnedFd};
use std::time::Duration;

/// How long a submission may take before its fence wait reports that a semaphore wait never came.
const FENCE_TIMEOUT: Duration = Duration::from_secs(10);

const OPAQUE_FD_MEMORY: vk::ExternalMemoryHandleTypeFlags = vk::ExternalMemoryHandleTypeFlags::OPAQUE_FD;
const OPAQUE_FD_SEMAPHORE: vk::ExternalSemaphoreHandleTypeFlags =
    vk::ExternalSemaphoreHandleTypeFlags::OPAQUE_FD;
const IMAGE_FORMAT: vk::Format = vk::Format::R32_SFLOAT;

/// A headless Vulkan instance and logical device on the physical device that is a given CUDA device.
pub struct Vulkan {
    entry: ash::Entry,
    instance: ash::Instance,
    physical_device: vk::PhysicalDevice,
    device_name: String,
    device: ash::Device,
    queue: vk::Queue,
    queue_family: u32,
    command_pool: vk::CommandPool,
    memory_properties: vk::PhysicalDeviceMemoryProperties,
    memory_fd: ash::khr::external_memory_fd::Device,
    semaphore_fd: ash::khr::external_semaphore_fd::Device,
    owned: RefCell<Owned>,
    /// Set when a submission never finished: the device is then left alive rather than waited on.
    stuck: Cell<bool>,
}

/// The objects a [`Vulkan`] destroys when it drops.
#[derive(Default)]
struct Owned {
    buffers: Vec<vk::Buffer>,
    images: Vec<vk::Image>,
    memories: Vec<vk::DeviceMemory>,
    semaphores: Vec<vk::Semaphore>,
}

/// A buffer and its dedicated exportable memory, made by [`Vulkan::exportable_buffer`].
#[derive(Clone, Copy, Debug)]
pub struct SharedBuffer {
    buffer: vk::Buffer,
    memory: vk::DeviceMemory,
    size: u64,
    allocation_size: u64,
}

impl SharedBuffer {
    /// The size asked for, in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The size of the memory allocation (`VkMemoryRequirements::size`): what CUDA must import.
    pub fn allocation_size(&self) -> u64 {
        self.allocation_size
    }
}

/// A 2D `R32_SFLOAT` image in `GENERAL` layout and its dedicated exportable memory, made by
/// [`Vulkan::exportable_image`].
#[derive(Clone, Copy, Debug)]
pub struct SharedImage {
    image: vk::Image,
    memory: vk::DeviceMemory,
    width: u32,
    height: u32,
    levels: u32,
    allocation_size: u64,
}

impl SharedImage {
    /// The size of the memory allocation (`VkMemoryRequirements::size`): what CUDA must import.
    pub fn allocation_size(&self) -> u64 {
        self.allocation_size
    }

    /// The width of mip level 0, in texels.
    pub fn width(&self) -> u32 {
        self.width
    }

    /// The height of mip level 0, in texels.
    pub fn height(&self) -> u32 {
        self.height
    }

    /// The number of mip levels.
    pub fn levels(&self) -> u32 {
        self.levels
    }

    /// The extent of mip level `level`: each side halved `level` times, at least 1.
    pub fn level_extent(&self, level: u32) -> (u32, u32) {
        ((self.width >> level).max(1), (self.height >> level).max(1))
    }
}

/// An exportable binary or timeline semaphore, made by [`Vulkan::binary_semaphore`] or
/// [`Vulkan::timeline_semaphore`].
#[derive(Clone, Copy, Debug)]
pub struct SharedSemaphore {
    semaphore: vk::Semaphore,
    timeline: bool,
}

impl SharedSemaphore {
    /// Whether this is a timeline semaphore (rather than a binary one).
    pub fn is_timeline(&self) -> bool {
        self.timeline
    }
}

/// A host-visible, host-coherent buffer that one submission copies through.
struct Staging {
    buffer: vk::Buffer,
    memory: vk::DeviceMemory,
    size: u64,
}

fn failed(call: &str, result: vk::Result) -> String {
    format!("{call} failed: {result:?} ({})", result.as_raw())
}

fn hex(uuid: &[u8; 16]) -> String {
    uuid.iter().map(|b| format!("{b:02x}")).collect()
}

fn load_entry() -> Result<ash::Entry, String> {
    // SAFETY: loading the Vulkan loader runs its initialisers; the loader is trusted system code.
    unsafe { ash::Entry::load() }.map_err(|e| format!("cannot load the Vulkan loader (libvulkan.so.1): {e}"))
}

/// An instance of API version 1.2, with no layers and no extensions.
fn create_instance(entry: &ash::Entry) -> Result<ash::Instance, String> {
    // SAFETY: plain queries and creation with valid, fully initialised structures.
    unsafe {
        let version = entry
            .try_enumerate_instance_version()
            .map_err(|e| failed("vkEnumerateInstanceVersion", e))?
            .unwrap_or(vk::API_VERSION_1_0);
        if version < vk::API_VERSION_1_2 {
            return Err(format!(
                "the Vulkan loader supports instance version {}.{}; 1.2 is needed",
                vk::api_version_major(version),
                vk::api_version_minor(version)
            ));
        }
        let app =
            vk::ApplicationInfo::default().application_name(c"cuda-tests").api_version(vk::API_VERSION_1_2);
        let info = vk::InstanceCreateInfo::default().application_info(&app);
        entry.create_instance(&info, None).map_err(|e| failed("vkCreateInstance", e))
    }
}

/// Each physical device with its name and `deviceUUID`.
fn physical_devices(instance: &ash::Instance) -> Result<Vec<(vk::PhysicalDevice, String, [u8; 16])>, String> {
    // SAFETY: the instance is alive; the property structures are chained correctly.
    unsafe {
        let devices =
            instance.enumerate_physical_devices().map_err(|e| failed("vkEnumeratePhysicalDevices", e))?;
        Ok(devices
            .into_iter()
            .map(|pd| {
                let mut id = vk::PhysicalDeviceIDProperties::default();
                let mut props = vk::PhysicalDeviceProperties2::default().push_next(&mut id);
                instance.get_physical_device_properties2(pd, &mut props);
                let name = props
                    .properties
                    .device_name_as_c_str()
                    .map_or_else(|_| "?".to_owned(), |n| n.to_string_lossy().into_owned());
                (pd, name, id.device_uuid)
            })
            .collect())
    }
}

/// The `deviceUUID` of the first Vulkan physical device: for trying the peer where no CUDA device is.
pub fn first_device_uuid() -> Result<[u8; 16], String> {
    let entry = load_entry()?;
    let instance = create_instance(&entry)?;
    let first = physical_devices(&instance).map(|devices| devices.first().map(|d| d.2));
    // SAFETY: nothing made from the instance is alive.
    unsafe { instance.destroy_instance(None) };
    first?.ok_or_else(|| "the Vulkan loader lists no physical device".to_owned())
}

impl Vulkan {
    /// Loads the loader, creates an instance (API version 1.2, no layers, no surface extensions),
    /// picks the physical device whose `VkPhysicalDeviceIDProperties::deviceUUID` equals `uuid`
    /// (the CUDA device's UUID from `cuDeviceGetUuid`) and one queue family with transfer (and
    /// compute where there is one), and creates a device with `VK_KHR_external_memory_fd`,
    /// `VK_KHR_external_semaphore_fd` and the `timelineSemaphore` feature, and a command pool.
    /// Err says why: the loader's dlopen error, or the UUIDs of the devices found.
    pub fn new(uuid: [u8; 16]) -> Result<Vulkan, String> {
        let entry = load_entry()?;
        let instance = create_instance(&entry)?;
        match Self::open(&entry, instance.clone(), uuid) {
            Ok(vulkan) => Ok(vulkan),
            Err(e) => {
                // SAFETY: `open` destroyed whatever it created from the instance before failing, and the
                // loader stays loaded until `entry` drops after this.
                unsafe { instance.destroy_instance(None) };
                Err(e)
            }
        }
    }

    fn open(entry: &ash::Entry, instance: ash::Instance, uuid: [u8; 16]) -> Result<Vulkan, String> {
        let devices = physical_devices(&instance)?;
        let Some((physical_device, device_name, _)) = devices.iter().find(|d| d.2 == uuid).cloned() else {
            let found: Vec<String> =
                devices.iter().map(|(_, name, id)| format!("{} ({name})", hex(id))).collect();
            return Err(format!("no Vulkan device has UUID {}; found: [{}]", hex(&uuid), found.join(", ")));
        };
        // SAFETY: queries on a physical device of the live instance, then creation of the device
        // and its pool with structures that outlive the calls.
        unsafe {
            let props = instance.get_physical_device_properties(physical_device);
            if props.api_version < vk::API_VERSION_1_2 {
                return Err(format!(
                    "{device_name} supports Vulkan {}.{}; 1.2 is needed",
                    vk::api_version_major(props.api_version),
                    vk::api_version_minor(props.api_version)
                ));
            }
            let available = instance
                .enumerate_device_extension_properties(physical_device)
                .map_err(|e| failed("vkEnumerateDeviceExtensionProperties", e))?;
            let wanted = [ash::khr::external_memory_fd::NAME, ash::khr::external_semaphore_fd::NAME];
            let missing: Vec<&CStr> = wanted
                .iter()
                .copied()
                .filter(|w| !available.iter().any(|a| a.extension_name_as_c_str() == Ok(*w)))
                .collect();
            if !missing.is_empty() {
                return Err(format!("{device_name} lacks the device extensions {missing:?}"));
            }
            let mut features12 = vk::PhysicalDeviceVulkan12Features::default();
            let mut features = vk::PhysicalDeviceFeatures2::default().push_next(&mut features12);
            instance.get_physical_device_features2(physical_device, &mut features);
            if features12.timeline_semaphore == vk::FALSE {
                return Err(format!("{device_name} lacks the timelineSemaphore feature"));
            }

            let families = instance.get_physical_device_queue_family_properties(physical_device);
            // Compute and graphics queues can all do transfers; prefer one with compute.
            let rank = |flags: vk::QueueFlags| {
                if flags.contains(vk::QueueFlags::COMPUTE) {
                    Some(0)
                } else if flags.intersects(vk::QueueFlags::GRAPHICS | vk::QueueFlags::TRANSFER) {
                    Some(1)
                } else {
                    None
                }
            };
            let queue_family = (0u32..)
                .zip(&families)
                .filter(|(_, f)| f.queue_count > 0)
                .filter_map(|(i, f)| rank(f.queue_flags).map(|r| (r, i)))
                .min()
                .map(|(_, i)| i)
                .ok_or_else(|| format!("{device_name} has no queue family that can copy"))?;

            let priorities = [1.0f32];
            let queues = [vk::DeviceQueueCreateInfo::default()
                .queue_family_index(queue_family)
                .queue_priorities(&priorities)];
            let extensions = wanted.map(CStr::as_ptr);
            let mut enabled12 = vk::PhysicalDeviceVulkan12Features::default().timeline_semaphore(true);
            let info = vk::DeviceCreateInfo::default()
                .queue_create_infos(&queues)
                .enabled_extension_names(&extensions)
                .push_next(&mut enabled12);
            let device = instance
                .create_device(physical_device, &info, None)
                .map_err(|e| failed("vkCreateDevice", e))?;
            let pool_info = vk::CommandPoolCreateInfo::default()
                .flags(vk::CommandPoolCreateFlags::RESET_COMMAND_BUFFER)
                .queue_family_index(queue_family);
            let command_pool = match device.create_command_pool(&pool_info, None) {
                Ok(pool) => pool,
                Err(e) => {
                    device.destroy_device(None);
                    return Err(failed("vkCreateCommandPool", e));
                }
            };
            Ok(Vulkan {
                queue: device.get_device_queue(queue_family, 0),
                memory_properties: instance.get_physical_device_memory_properties(physical_device),
                memory_fd: ash::khr::external_memory_fd::Device::new(&instance, &device),
                semaphore_fd: ash::khr::external_semaphore_fd::Device::new(&instance, &device),
                entry: entry.clone(),
                instance,
                physical_device,
                device_name,
                device,
                queue_family,
                command_pool,
                owned: RefCell::default(),
                stuck: Cell::new(false),
            })
        }
    }

    /// The physical device's name, as Vulkan reports it.
    pub fn device_name(&self) -> &str {
        &self.device_name
    }

    /// The index of a memory type allowed by `bits` that has all of `required`, preferring one that
    /// also has `preferred`.
    fn memory_type(
        &self,
        bits: u32,
        required: vk::MemoryPropertyFlags,
        preferred: vk::MemoryPropertyFlags,
    ) -> Result<u32, String> {
        let props = &self.memory_properties;
        let types = &props.memory_types[..props.memory_type_count as usize];
        let allowed = |i: u32, want: vk::MemoryPropertyFlags| {
            bits & (1 << i) != 0 && types[i as usize].property_flags.contains(want)
        };
        (0..props.memory_type_count)
            .find(|&i| allowed(i, required | preferred))
            .or_else(|| (0..props.memory_type_count).find(|&i| allowed(i, required)))
            .ok_or_else(|| format!("no memory type in bits {bits:#x} has {required:?}"))
    }

    /// Allocates `requirements.size` bytes of memory, exportable as `OPAQUE_FD` and dedicated to
    /// `buffer` or `image` when `export` is set, and records it.
    fn allocate(
        &self,
        requirements: vk::MemoryRequirements,
        export: Option<(vk::Buffer, vk::Image)>,
        required: vk::MemoryPropertyFlags,
        preferred: vk::MemoryPropertyFlags,
    ) -> Result<vk::DeviceMemory, String> {
        let memory_type = self.memory_type(requirements.memory_type_bits, required, preferred)?;
        let mut export_info = vk::ExportMemoryAllocateInfo::default().handle_types(OPAQUE_FD_MEMORY);
        let mut dedicated = vk::MemoryDedicatedAllocateInfo::default();
        let mut info = vk::MemoryAllocateInfo::default()
            .allocation_size(requirements.size)
            .memory_type_index(memory_type);
        if let Some((buffer, image)) = export {
            dedicated = dedicated.buffer(buffer).image(image);
            info = info.push_next(&mut export_info).push_next(&mut dedicated);
        }
        // SAFETY: the structures chained into `info` outlive the call.
        let memory = unsafe { self.device.allocate_memory(&info, None) }
            .map_err(|e| failed(&format!("vkAllocateMemory of {} bytes", requirements.size), e))?;
        self.owned.borrow_mut().memories.push(memory);
        Ok(memory)
    }

    /// A buffer of `size` bytes (transfer source and destination, storage) bound to `DEVICE_LOCAL`
    /// memory allocated with `VkExportMemoryAllocateInfo(OPAQUE_FD)` and dedicated to it.
    pub fn exportable_buffer(&self, size: u64) -> Result<SharedBuffer, String> {
        let usage = vk::BufferUsageFlags::TRANSFER_SRC
            | vk::BufferUsageFlags::TRANSFER_DST
            | vk::BufferUsageFlags::STORAGE_BUFFER;
        let info = vk::PhysicalDeviceExternalBufferInfo::default().usage(usage).handle_type(OPAQUE_FD_MEMORY);
        let mut external = vk::ExternalBufferProperties::default();
        // SAFETY: a query on the device's physical device.
        unsafe {
            self.instance.get_physical_device_external_buffer_properties(
                self.physical_device,
                &info,
                &mut external,
            );
        }
        let features = external.external_memory_properties.external_memory_features;
        if !features.contains(vk::ExternalMemoryFeatureFlags::EXPORTABLE) {
            return Err(format!("{} cannot export buffer memory as OPAQUE_FD", self.device_name));
        }
        let (buffer, requirements) = self.create_buffer(size, usage, true)?;
        let memory = self.allocate(
            requirements,
            Some((buffer, vk::Image::null())),
            vk::MemoryPropertyFlags::empty(),
            vk::MemoryPropertyFlags::DEVICE_LOCAL,
        )?;
        // SAFETY: both are alive and the memory was allocated for this buffer.
        unsafe { self.device.bind_buffer_memory(buffer, memory, 0) }
            .map_err(|e| failed("vkBindBufferMemory", e))?;
        Ok(SharedBuffer { buffer, memory, size, allocation_size: requirements.size })
    }

    /// Creates and records a buffer, marked for `OPAQUE_FD` external memory when `external`.
    fn create_buffer(
        &self,
        size: u64,
        usage: vk::BufferUsageFlags,
        external: bool,
    ) -> Result<(vk::Buffer, vk::MemoryRequirements), String> {
        let mut external_info = vk::ExternalMemoryBufferCreateInfo::default().handle_types(OPAQUE_FD_MEMORY);
        let mut info =
            vk::BufferCreateInfo::default().size(size).usage(usage).sharing_mode(vk::SharingMode::EXCLUSIVE);
        if external {
            info = info.push_next(&mut external_info);
        }
        // SAFETY: the chained structure outlives the call; the buffer is alive for the query.
        unsafe {
            let buffer = self
                .device
                .create_buffer(&info, None)
                .map_err(|e| failed(&format!("vkCreateBuffer of {size} bytes"), e))?;
            self.owned.borrow_mut().buffers.push(buffer);
            Ok((buffer, self.device.get_buffer_memory_requirements(buffer)))
        }
    }

    /// A new POSIX fd for memory made exportable as `OPAQUE_FD`.
    fn memory_fd(&self, memory: vk::DeviceMemory) -> Result<OwnedFd, String> {
        let info = vk::MemoryGetFdInfoKHR::default().memory(memory).handle_type(OPAQUE_FD_MEMORY);
        // SAFETY: the memory is alive and exportable; a returned fd is new and ours to own.
        unsafe {
            let fd = self.memory_fd.get_memory_fd(&info).map_err(|e| failed("vkGetMemoryFdKHR", e))?;
            if fd < 0 {
                return Err(format!("vkGetMemoryFdKHR returned fd {fd}"));
            }
            Ok(OwnedFd::from_raw_fd(fd))
        }
    }

    /// A new POSIX fd for the buffer's memory (`vkGetMemoryFdKHR`, `OPAQUE_FD`).
    pub fn export_memory_fd(&self, buffer: &SharedBuffer) -> Result<OwnedFd, String> {
        self.memory_fd(buffer.memory)
    }

    /// A 2D `R32_SFLOAT` image with optimal tiling and `levels` mip levels (transfer source and
    /// destination, sampled, storage), bound to exportable (`OPAQUE_FD`) dedicated memory, and
    /// moved once to `VK_IMAGE_LAYOUT_GENERAL`, where it stays.
    pub fn exportable_image(&self, width: u32, height: u32, levels: u32) -> Result<SharedImage, String> {
        let max_levels = 32 - width.max(height).max(1).leading_zeros();
        if width == 0 || height == 0 || levels == 0 || levels > max_levels {
            return Err(format!(
                "a {width}x{height} image cannot have {levels} mip levels (1..={max_levels})"
            ));
        }
        let usage = vk::ImageUsageFlags::TRANSFER_SRC
            | vk::ImageUsageFlags::TRANSFER_DST
            | vk::ImageUsageFlags::SAMPLED
            | vk::ImageUsageFlags::STORAGE;
        let mut external_format =
            vk::PhysicalDeviceExternalImageFormatInfo::default().handle_type(OPAQUE_FD_MEMORY);
        let format_info = vk::PhysicalDeviceImageFormatInfo2::default()
            .format(IMAGE_FORMAT)
            .ty(vk::ImageType::TYPE_2D)
            .tiling(vk::ImageTiling::OPTIMAL)
            .usage(usage)
            .push_next(&mut external_format);
        let mut external_props = vk::ExternalImageFormatProperties::default();
        let mut format_props = vk::ImageFormatProperties2::default().push_next(&mut external_props);
        // SAFETY: a query on the device's physical device with a correct chain.
        unsafe {
            self.instance
                .get_physical_device_image_format_properties2(
                    self.physical_device,
                    &format_info,
                    &mut format_props,
                )
                .map_err(|e| {
                    failed("vkGetPhysicalDeviceImageFormatProperties2 (R32_SFLOAT, OPAQUE_FD)", e)
                })?;
        }
        let features = external_props.external_memory_properties.external_memory_features;
        if !features.contains(vk::ExternalMemoryFeatureFlags::EXPORTABLE) {
            return Err(format!("{} cannot export R32_SFLOAT image memory as OPAQUE_FD", self.device_name));
        }

        let mut external_info = vk::ExternalMemoryImageCreateInfo::default().handle_types(OPAQUE_FD_MEMORY);
        let info = vk::ImageCreateInfo::default()
            .image_type(vk::ImageType::TYPE_2D)
            .format(IMAGE_FORMAT)
            .extent(vk::Extent3D { width, height, depth: 1 })
            .mip_levels(levels)
            .array_layers(1)
            .samples(vk::SampleCountFlags::TYPE_1)
            .tiling(vk::ImageTiling::OPTIMAL)
            .usage(usage)
            .sharing_mode(vk::SharingMode::EXCLUSIVE)
            .initial_layout(vk::ImageLayout::UNDEFINED)
            .push_next(&mut external_info);
        // SAFETY: the chained structure outlives the call; the image is alive for the query.
        let (image, requirements) = unsafe {
            let image = self
                .device
                .create_image(&info, None)
                .map_err(|e| failed(&format!("vkCreateImage ({width}x{height}, {levels} levels)"), e))?;
            self.owned.borrow_mut().images.push(image);
            (image, self.device.get_image_memory_requirements(image))
        };
        let memory = self.allocate(
            requirements,
            Some((vk::Buffer::null(), image)),
            vk::MemoryPropertyFlags::empty(),
            vk::MemoryPropertyFlags::DEVICE_LOCAL,
        )?;
        // SAFETY: both are alive and the memory was allocated for this image.
        unsafe { self.device.bind_image_memory(image, memory, 0) }
            .map_err(|e| failed("vkBindImageMemory", e))?;

        let barrier = vk::ImageMemoryBarrier::default()
            .src_access_mask(vk::AccessFlags::empty())
            .dst_access_mask(vk::AccessFlags::MEMORY_READ | vk::AccessFlags::MEMORY_WRITE)
            .old_layout(vk::ImageLayout::UNDEFINED)
            .new_layout(vk::ImageLayout::GENERAL)
            .src_queue_family_index(vk::QUEUE_FAMILY_IGNORED)
            .dst_queue_family_index(vk::QUEUE_FAMILY_IGNORED)
            .image(image)
            .subresource_range(color_levels(0, levels));
        self.submit("exportable_image", None, None, |cmd| {
            // SAFETY: `cmd` is recording and the image is alive.
            unsafe {
                self.device.cmd_pipeline_barrier(
                    cmd,
                    vk::PipelineStageFlags::TOP_OF_PIPE,
                    vk::PipelineStageFlags::ALL_COMMANDS,
                    vk::DependencyFlags::empty(),
                    &[],
                    &[],
                    &[barrier],
                );
            }
        })?;
        Ok(SharedImage { image, memory, width, height, levels, allocation_size: requirements.size })
    }

    /// A new POSIX fd for the image's memory (`vkGetMemoryFdKHR`, `OPAQUE_FD`).
    pub fn export_image_fd(&self, image: &SharedImage) -> Result<OwnedFd, String> {
        self.memory_fd(image.memory)
    }

    fn semaphore(&self, timeline: Option<u64>) -> Result<SharedSemaphore, String> {
        let ty = if timeline.is_some() { vk::SemaphoreType::TIMELINE } else { vk::SemaphoreType::BINARY };
        let mut type_info = vk::SemaphoreTypeCreateInfo::default().semaphore_type(ty);
        let query = vk::PhysicalDeviceExternalSemaphoreInfo::default()
            .handle_type(OPAQUE_FD_SEMAPHORE)
            .push_next(&mut type_info);
        let mut props = vk::ExternalSemaphoreProperties::default();
        // SAFETY: a query on the device's physical device with a correct chain.
        unsafe {
            self.instance.get_physical_device_external_semaphore_properties(
                self.physical_device,
                &query,
                &mut props,
            );
        }
        if !props.external_semaphore_features.contains(vk::ExternalSemaphoreFeatureFlags::EXPORTABLE) {
            return Err(format!("{} cannot export {ty:?} semaphores as OPAQUE_FD", self.device_name));
        }
        let mut type_info =
            vk::SemaphoreTypeCreateInfo::default().semaphore_type(ty).initial_value(timeline.unwrap_or(0));
        let mut export = vk::ExportSemaphoreCreateInfo::default().handle_types(OPAQUE_FD_SEMAPHORE);
        let info = vk::SemaphoreCreateInfo::default().push_next(&mut type_info).push_next(&mut export);
        // SAFETY: the chained structures outlive the call.
        let semaphore = unsafe { self.device.create_semaphore(&info, None) }
            .map_err(|e| failed(&format!("vkCreateSemaphore ({ty:?})"), e))?;
        self.owned.borrow_mut().semaphores.push(semaphore);
        Ok(SharedSemaphore { semaphore, timeline: timeline.is_some() })
    }

    /// An exportable (`OPAQUE_FD`) timeline semaphore whose value starts at `initial`.
    pub fn timeline_semaphore(&self, initial: u64) -> Result<SharedSemaphore, String> {
        self.semaphore(Some(initial))
    }

    /// An exportable (`OPAQUE_FD`) binary semaphore.
    pub fn binary_semaphore(&self) -> Result<SharedSemaphore, String> {
        self.semaphore(None)
    }

    /// A new POSIX fd for the semaphore (`vkGetSemaphoreFdKHR`, `OPAQUE_FD`).
    pub fn export_semaphore_fd(&self, semaphore: &SharedSemaphore) -> Result<OwnedFd, String> {
        let info = vk::SemaphoreGetFdInfoKHR::default()
            .semaphore(semaphore.semaphore)
            .handle_type(OPAQUE_FD_SEMAPHORE);
        // SAFETY: the semaphore is alive and exportable; a returned fd is new and ours to own.
        unsafe {
            let fd =
                self.semaphore_fd.get_semaphore_fd(&info).map_err(|e| failed("vkGetSemaphoreFdKHR", e))?;
            if fd < 0 {
                return Err(format!("vkGetSemaphoreFdKHR returned fd {fd}"));
            }
            Ok(OwnedFd::from_raw_fd(fd))
        }
    }

    fn timeline(semaphore: &SharedSemaphore, what: &str) -> Result<vk::Semaphore, String> {
        if semaphore.timeline {
            Ok(semaphore.semaphore)
        } else {
            Err(format!("{what} needs a timeline semaphore; this one is binary"))
        }
    }

    /// The timeline semaphore's current value (`vkGetSemaphoreCounterValue`).
    pub fn semaphore_value(&self, semaphore: &SharedSemaphore) -> Result<u64, String> {
        let semaphore = Self::timeline(semaphore, "semaphore_value")?;
        // SAFETY: the semaphore is an alive timeline semaphore.
        unsafe { self.device.get_semaphore_counter_value(semaphore) }
            .map_err(|e| failed("vkGetSemaphoreCounterValue", e))
    }

    /// Signals a timeline semaphore to `value` from the host (`vkSignalSemaphore`).
    pub fn signal_on_host(&self, semaphore: &SharedSemaphore, value: u64) -> Result<(), String> {
        let semaphore = Self::timeline(semaphore, "signal_on_host")?;
        let info = vk::SemaphoreSignalInfo::default().semaphore(semaphore).value(value);
        // SAFETY: the semaphore is an alive timeline semaphore.
        unsafe { self.device.signal_semaphore(&info) }
            .map_err(|e| failed(&format!("vkSignalSemaphore to {value}"), e))
    }

    /// Waits on the host until a timeline semaphore reaches `value`, at most `timeout`
    /// (`vkWaitSemaphores`); Err on timeout says so.
    pub fn wait_on_host(
        &self,
        semaphore: &SharedSemaphore,
        value: u64,
        timeout: Duration,
    ) -> Result<(), String> {
        let semaphores = [Self::timeline(semaphore, "wait_on_host")?];
        let values = [value];
        let info = vk::SemaphoreWaitInfo::default().semaphores(&semaphores).values(&values);
        let nanos = u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX);
        // SAFETY: the semaphore is an alive timeline semaphore; the arrays outlive the call.
        match unsafe { self.device.wait_semaphores(&info, nanos) } {
            Ok(()) => Ok(()),
            Err(vk::Result::TIMEOUT) => {
                let now = self.semaphore_value(semaphore).map_or_else(|e| e, |v| v.to_string());
                Err(format!(
                    "the timeline semaphore did not reach {value} within {timeout:?} (it is at {now})"
                ))
            }
            Err(e) => Err(failed(&format!("vkWaitSemaphores for {value}"), e)),
        }
    }

    /// Records `record` into a one-time command buffer and submits it alone, waiting on the GPU
    /// for `wait` and signalling `signal` (values are ignored for binary semaphores), then waits at
    /// most [`FENCE_TIMEOUT`] for its fence.
    fn submit(
        &self,
        what: &str,
        wait: Option<(&SharedSemaphore, u64)>,
        signal: Option<(&SharedSemaphore, u64)>,
        record: impl FnOnce(vk::CommandBuffer),
    ) -> Result<(), String> {
        let alloc = vk::CommandBufferAllocateInfo::default()
            .command_pool(self.command_pool)
            .level(vk::CommandBufferLevel::PRIMARY)
            .command_buffer_count(1);
        // SAFETY: the pool belongs to this device and is used from this thread only.
        let cmd = unsafe { self.device.allocate_command_buffers(&alloc) }
            .map_err(|e| failed(&format!("{what}: vkAllocateCommandBuffers"), e))?
            .into_iter()
            .next()
            .ok_or_else(|| format!("{what}: vkAllocateCommandBuffers returned no command buffer"))?;
        // SAFETY: a fence with no chained structures.
        let fence = match unsafe { self.device.create_fence(&vk::FenceCreateInfo::default(), None) } {
            Ok(fence) => fence,
            Err(e) => {
                // SAFETY: the command buffer was never submitted.
                unsafe { self.device.free_command_buffers(self.command_pool, &[cmd]) };
                return Err(failed(&format!("{what}: vkCreateFence"), e));
            }
        };
        let result = self.record_submit_wait(what, cmd, fence, wait, signal, record);
        if !self.stuck.get() {
            // SAFETY: the fence was waited on (or never submitted), so neither is in use.
            unsafe {
                self.device.destroy_fence(fence, None);
                self.device.free_command_buffers(self.command_pool, &[cmd]);
            }
        }
        result
    }

    fn record_submit_wait(
        &self,
        what: &str,
        cmd: vk::CommandBuffer,
        fence: vk::Fence,
        wait: Option<(&SharedSemaphore, u64)>,
        signal: Option<(&SharedSemaphore, u64)>,
        record: impl FnOnce(vk::CommandBuffer),
    ) -> Result<(), String> {
        let begin = vk::CommandBufferBeginInfo::default().flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT);
        // SAFETY: `cmd` is a fresh command buffer of this device.
        unsafe { self.device.begin_command_buffer(cmd, &begin) }
            .map_err(|e| failed(&format!("{what}: vkBeginCommandBuffer"), e))?;
        record(cmd);
        // SAFETY: `cmd` is recording.
        unsafe { self.device.end_command_buffer(cmd) }
            .map_err(|e| failed(&format!("{what}: vkEndCommandBuffer"), e))?;

        let wait_semaphores: Vec<vk::Semaphore> = wait.iter().map(|(s, _)| s.semaphore).collect();
        let wait_values: Vec<u64> = wait.iter().map(|&(_, v)| v).collect();
        let wait_stages = vec![vk::PipelineStageFlags::ALL_COMMANDS; wait_semaphores.len()];
        let signal_semaphores: Vec<vk::Semaphore> = signal.iter().map(|(s, _)| s.semaphore).collect();
        let signal_values: Vec<u64> = signal.iter().map(|&(_, v)| v).collect();
        let any_timeline = wait.iter().chain(signal.iter()).any(|(s, _)| s.timeline);
        let mut timeline_info = vk::TimelineSemaphoreSubmitInfo::default()
            .wait_semaphore_values(&wait_values)
            .signal_semaphore_values(&signal_values);
        let cmds = [cmd];
        let mut info = vk::SubmitInfo::default()
            .wait_semaphores(&wait_semaphores)
            .wait_dst_stage_mask(&wait_stages)
            .command_buffers(&cmds)
            .signal_semaphores(&signal_semaphores);
        if any_timeline {
            info = info.push_next(&mut timeline_info);
        }
        // SAFETY: every array and chained structure outlives the call; the queue is used from this
        // thread only.
        unsafe { self.device.queue_submit(self.queue, &[info], fence) }
            .map_err(|e| failed(&format!("{what}: vkQueueSubmit"), e))?;

        let nanos = u64::try_from(FENCE_TIMEOUT.as_nanos()).unwrap_or(u64::MAX);
        // SAFETY: the fence was just submitted.
        match unsafe { self.device.wait_for_fences(&[fence], true, nanos) } {
            Ok(()) => Ok(()),
            Err(vk::Result::TIMEOUT) => {
                let waited = match wait {
                    Some((s, v)) if s.timeline => format!("the wait for timeline value {v} never came: "),
                    Some(_) => "the wait for the binary semaphore never came: ".to_owned(),
                    None => String::new(),
                };
                self.unblock(fence, wait);
                Err(format!("{what}: {waited}the submission did not complete within {FENCE_TIMEOUT:?}"))
            }
            Err(e) => Err(failed(&format!("{what}: vkWaitForFences"), e)),
        }
    }

    /// After a submission timed out: releases a timeline wait by signalling it from the host, so
    /// that its resources can be freed; if it still does not finish, marks the device as stuck so
    /// that nothing in use is freed and the device is never waited on.
    fn unblock(&self, fence: vk::Fence, wait: Option<(&SharedSemaphore, u64)>) {
        if let Some((s, value)) = wait.filter(|(s, _)| s.timeline) {
            if self.semaphore_value(s).is_ok_and(|now| now < value) {
                let _ = self.signal_on_host(s, value);
            }
            // SAFETY: the fence was submitted.
            if unsafe { self.device.wait_for_fences(&[fence], true, 1_000_000_000) }.is_ok() {
                return;
            }
        }
        self.stuck.set(true);
    }

    /// A recorded host-visible, host-coherent buffer of `size` bytes (at least 1).
    fn staging(&self, size: u64) -> Result<Staging, String> {
        let size = size.max(1);
        let usage = vk::BufferUsageFlags::TRANSFER_SRC | vk::BufferUsageFlags::TRANSFER_DST;
        let (buffer, requirements) = self.create_buffer(size, usage, false)?;
        let host = vk::MemoryPropertyFlags::HOST_VISIBLE | vk::MemoryPropertyFlags::HOST_COHERENT;
        let memory = self.allocate(requirements, None, host, vk::MemoryPropertyFlags::empty())?;
        let staging = Staging { buffer, memory, size };
        // SAFETY: both are alive and the memory was allocated for this buffer.
        if let Err(e) = unsafe { self.device.bind_buffer_memory(buffer, memory, 0) } {
            self.free_staging(staging);
            return Err(failed("vkBindBufferMemory (staging)", e));
        }
        Ok(staging)
    }

    /// Destroys a staging buffer and frees its memory, unless a submission is stuck using it.
    fn free_staging(&self, staging: Staging) {
        if !self.stuck.get() {
            self.free_buffer(staging.buffer, staging.memory);
        }
    }

    /// Forgets and destroys a buffer and its memory, which no pending submission may use.
    fn free_buffer(&self, buffer: vk::Buffer, memory: vk::DeviceMemory) {
        let mut owned = self.owned.borrow_mut();
        owned.buffers.retain(|&b| b != buffer);
        owned.memories.retain(|&m| m != memory);
        // SAFETY: both were made by this device and no pending submission uses them.
        unsafe {
            self.device.destroy_buffer(buffer, None);
            self.device.free_memory(memory, None);
        }
    }

    /// Destroys the buffer and frees its Vulkan memory now rather than when `self` drops, once
    /// the device is idle. Every copy of the handle is then dangling.
    pub fn destroy_buffer(&self, buffer: SharedBuffer) -> Result<(), String> {
        self.idle()?;
        self.free_buffer(buffer.buffer, buffer.memory);
        Ok(())
    }

    /// Destroys the image and frees its Vulkan memory now rather than when `self` drops, once
    /// the device is idle. Every copy of the handle is then dangling.
    pub fn destroy_image(&self, image: SharedImage) -> Result<(), String> {
        self.idle()?;
        let mut owned = self.owned.borrow_mut();
        owned.images.retain(|&i| i != image.image);
        owned.memories.retain(|&m| m != image.memory);
        // SAFETY: both were made by this device and the device is idle.
        unsafe {
            self.device.destroy_image(image.image, None);
            self.device.free_memory(image.memory, None);
        }
        Ok(())
    }

    /// Destroys the semaphore now rather than when `self` drops, once the device is idle. Every
    /// copy of the handle is then dangling.
    pub fn destroy_semaphore(&self, semaphore: SharedSemaphore) -> Result<(), String> {
        self.idle()?;
        self.owned.borrow_mut().semaphores.retain(|&s| s != semaphore.semaphore);
        // SAFETY: made by this device, and the device is idle.
        unsafe { self.device.destroy_semaphore(semaphore.semaphore, None) };
        Ok(())
    }

    /// Maps the staging memory for the duration of `f`.
    fn with_mapped<T>(&self, staging: &Staging, f: impl FnOnce(&mut [u8]) -> T) -> Result<T, String> {
        // SAFETY: the memory is host-visible, not mapped elsewhere and not in use by the device;
        // the mapping covers `size` bytes until it is unmapped below.
        unsafe {
            let ptr = self
                .device
                .map_memory(staging.memory, 0, vk::WHOLE_SIZE, vk::MemoryMapFlags::empty())
                .map_err(|e| failed("vkMapMemory (staging)", e))?;
            let len = usize::try_from(staging.size).map_err(|e| e.to_string())?;
            let out = f(std::slice::from_raw_parts_mut(ptr.cast::<u8>(), len));
            self.device.unmap_memory(staging.memory);
            Ok(out)
        }
    }

    /// Makes the transfer writes to the staging buffer visible to host reads after the fence.
    fn transfer_to_host_barrier(&self, cmd: vk::CommandBuffer) {
        let barrier = vk::MemoryBarrier::default()
            .src_access_mask(vk::AccessFlags::TRANSFER_WRITE)
            .dst_access_mask(vk::AccessFlags::HOST_READ);
        // SAFETY: `cmd` is recording.
        unsafe {
            self.device.cmd_pipeline_barrier(
                cmd,
                vk::PipelineStageFlags::TRANSFER,
                vk::PipelineStageFlags::HOST,
                vk::DependencyFlags::empty(),
                &[barrier],
                &[],
                &[],
            );
        }
    }

    /// One submission: waits on the GPU for `wait` (the value is ignored for a binary semaphore),
    /// copies the whole buffer into a staging buffer, signals `signal` if given, then waits at most
    /// 10 s for it to complete and returns the bytes. On timeout a timeline wait is released by
    /// signalling its value from the host (so that the submission's resources can be freed); a
    /// binary one cannot be, and the device is then left alone until the process exits.
    pub fn read_buffer_after(
        &self,
        buffer: &SharedBuffer,
        wait: Option<(&SharedSemaphore, u64)>,
        signal: Option<(&SharedSemaphore, u64)>,
    ) -> Result<Vec<u8>, String> {
        let staging = self.staging(buffer.size)?;
        let region = vk::BufferCopy { src_offset: 0, dst_offset: 0, size: buffer.size };
        let result = self
            .submit("read_buffer_after", wait, signal, |cmd| {
                if buffer.size > 0 {
                    // SAFETY: `cmd` is recording; both buffers are alive and large enough.
                    unsafe { self.device.cmd_copy_buffer(cmd, buffer.buffer, staging.buffer, &[region]) };
                }
                self.transfer_to_host_barrier(cmd);
            })
            .and_then(|()| self.with_mapped(&staging, |bytes| bytes[..region.size as usize].to_vec()));
        self.free_staging(staging);
        result
    }

    /// One submission: copies `bytes` (at most the buffer's size) through a staging buffer into the
    /// start of `buffer`, then signals `signal` if given; waits for it to complete.
    pub fn write_buffer_then_signal(
        &self,
        buffer: &SharedBuffer,
        bytes: &[u8],
        signal: Option<(&SharedSemaphore, u64)>,
    ) -> Result<(), String> {
        let len = bytes.len() as u64;
        if len > buffer.size {
            return Err(format!("{len} bytes do not fit a buffer of {} bytes", buffer.size));
        }
        let staging = self.staging(len)?;
        let region = vk::BufferCopy { src_offset: 0, dst_offset: 0, size: len };
        let result = self
            .with_mapped(&staging, |mapped| mapped[..bytes.len()].copy_from_slice(bytes))
            .and_then(|()| {
                self.submit("write_buffer_then_signal", None, signal, |cmd| {
                    if len > 0 {
                        // SAFETY: `cmd` is recording; both buffers are alive and large enough.
                        unsafe { self.device.cmd_copy_buffer(cmd, staging.buffer, buffer.buffer, &[region]) };
                    }
                })
            });
        self.free_staging(staging);
        result
    }

    /// Like [`Vulkan::read_buffer_after`] for mip level `level` of the image, copied from the
    /// `GENERAL` layout: `(width >> level) * (height >> level)` floats (each side at least 1).
    pub fn read_image_after(
        &self,
        image: &SharedImage,
        level: u32,
        wait: Option<(&SharedSemaphore, u64)>,
    ) -> Result<Vec<f32>, String> {
        if level >= image.levels {
            return Err(format!("the image has {} mip levels; level {level} was asked for", image.levels));
        }
        let (width, height) = image.level_extent(level);
        let texels = u64::from(width) * u64::from(height);
        let staging = self.staging(texels * 4)?;
        let region = vk::BufferImageCopy::default()
            .image_subresource(vk::ImageSubresourceLayers {
                aspect_mask: vk::ImageAspectFlags::COLOR,
                mip_level: level,
                base_array_layer: 0,
                layer_count: 1,
            })
            .image_extent(vk::Extent3D { width, height, depth: 1 });
        let result = self
            .submit("read_image_after", wait, None, |cmd| {
                // SAFETY: `cmd` is recording; the image is in GENERAL layout and the staging
                // buffer holds the whole level.
                unsafe {
                    self.device.cmd_copy_image_to_buffer(
                        cmd,
                        image.image,
                        vk::ImageLayout::GENERAL,
                        staging.buffer,
                        &[region],
                    );
                }
                self.transfer_to_host_barrier(cmd);
            })
            .and_then(|()| {
                self.with_mapped(&staging, |bytes| {
                    bytes.chunks_exact(4).map(|c| f32::from_ne_bytes([c[0], c[1], c[2], c[3]])).collect()
                })
            });
        self.free_staging(staging);
        result
    }

    /// Waits until the device is idle; Err at once if a submission never completed, since then
    /// the device never becomes idle.
    pub fn idle(&self) -> Result<(), String> {
        if self.stuck.get() {
            return Err("a submission never completed; the device will not become idle".to_owned());
        }
        // SAFETY: the device is alive; its queue is used from this thread only.
        unsafe { self.device.device_wait_idle() }.map_err(|e| failed("vkDeviceWaitIdle", e))
    }
}

fn color_levels(base: u32, count: u32) -> vk::ImageSubresourceRange {
    vk::ImageSubresourceRange {
        aspect_mask: vk::ImageAspectFlags::COLOR,
        base_mip_level: base,
        level_count: count,
        base_array_layer: 0,
        layer_count: 1,
    }
}

impl Drop for Vulkan {
    fn drop(&mut self) {
        if self.stuck.get() {
            // A submission never finished: waiting would hang and destroying would free objects
            // in use, so everything is left for the process exit to reclaim.
            return;
        }
        let owned = std::mem::take(self.owned.get_mut());
        // SAFETY: once the device is idle nothing is in use; children go before their parents.
        unsafe {
            let _ = self.device.device_wait_idle();
            for buffer in owned.buffers {
                self.device.destroy_buffer(buffer, None);
            }
            for image in owned.images {
                self.device.destroy_image(image, None);
            }
            for memory in owned.memories {
                self.device.free_memory(memory, None);
            }
            for semaphore in owned.semaphores {
                self.device.destroy_semaphore(semaphore, None);
            }
            self.device.destroy_command_pool(self.command_pool, None);
            self.device.destroy_device(None);
            self.instance.destroy_instance(None);
        }
    }
}
