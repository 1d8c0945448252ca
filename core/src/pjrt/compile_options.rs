//! The few fields of `xla.CompileOptionsProto` we set, declared by hand with
//! the field numbers of `xla/pjrt/proto/compile_options.proto` so that no
//! protoc is needed. XLA's defaults for the replica and partition counts are
//! 0, which fails: they must always be set.

use prost::Message;

#[derive(Clone, PartialEq, Message)]
struct ComputationDevice {
    #[prost(int64, repeated, tag = "1")]
    replica_device_ids: Vec<i64>,
}

#[derive(Clone, PartialEq, Message)]
struct DeviceAssignmentProto {
    #[prost(int32, tag = "1")]
    replica_count: i32,
    #[prost(int32, tag = "2")]
    computation_count: i32,
    #[prost(message, repeated, tag = "3")]
    computation_devices: Vec<ComputationDevice>,
}

#[derive(Clone, PartialEq, Message)]
struct ExecutableBuildOptionsProto {
    #[prost(int64, tag = "1")]
    device_ordinal: i64,
    #[prost(int64, tag = "4")]
    num_replicas: i64,
    #[prost(int64, tag = "5")]
    num_partitions: i64,
    #[prost(message, optional, tag = "9")]
    device_assignment: Option<DeviceAssignmentProto>,
}

#[derive(Clone, PartialEq, Message)]
struct CompileOptionsProto {
    #[prost(message, optional, tag = "3")]
    executable_build_options: Option<ExecutableBuildOptionsProto>,
    #[prost(bool, tag = "4")]
    compile_portable_executable: bool,
}

/// How a program is compiled.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum CompileOptions {
    /// One replica, runnable on any device (chosen at execute time).
    Portable,
    /// `num_replicas` replicas on the given global device ids, in replica order.
    Replicated { device_ids: Vec<i64> },
}

impl CompileOptions {
    pub fn encode(&self) -> Vec<u8> {
        let proto = match self {
            CompileOptions::Portable => CompileOptionsProto {
                executable_build_options: Some(ExecutableBuildOptionsProto {
                    device_ordinal: -1,
                    num_replicas: 1,
                    num_partitions: 1,
                    device_assignment: None,
                }),
                compile_portable_executable: true,
            },
            CompileOptions::Replicated { device_ids } => CompileOptionsProto {
                executable_build_options: Some(ExecutableBuildOptionsProto {
                    device_ordinal: -1,
                    num_replicas: device_ids.len() as i64,
                    num_partitions: 1,
                    device_assignment: Some(DeviceAssignmentProto {
                        replica_count: device_ids.len() as i32,
                        computation_count: 1,
                        computation_devices: vec![ComputationDevice { replica_device_ids: device_ids.clone() }],
                    }),
                }),
                compile_portable_executable: false,
            },
        };
        proto.encode_to_vec()
    }
}
