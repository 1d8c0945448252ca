use torchtpu_core::pjrt::{discovery, Api, Client, CompileOptions, ElementType};

#[test]
fn add_one() {
    let found = discovery::find_plugin(None).unwrap();
    let api = Api::load(&found.path).unwrap();
    let client = Client::create(api, &[]).unwrap();
    println!("{} {} {:?}", client.platform_name(), client.platform_version(), client.devices());
    let prog = r#"module @m {
  func.func public @main(%arg0: tensor<4xf32>, %arg1: tensor<f32>) -> tensor<4xf32> {
    %0 = stablehlo.broadcast_in_dim %arg1, dims = [] : (tensor<f32>) -> tensor<4xf32>
    %1 = stablehlo.add %arg0, %0 : tensor<4xf32>
    return %1 : tensor<4xf32>
  }
}"#;
    let exe = client.compile("test", prog, &CompileOptions::Portable).unwrap();
    let data: Vec<f32> = vec![1.0, 2.0, 3.0, 4.0];
    let bytes: Vec<u8> = data.iter().flat_map(|x| x.to_le_bytes()).collect();
    let x = client.buffer_from_host(&bytes, ElementType::F32, &[4], 1).unwrap();
    let s = client.buffer_from_host(&10f32.to_le_bytes(), ElementType::F32, &[], 1).unwrap();
    let (outs, ev) = exe.execute(&[&x, &s], 1).unwrap();
    ev.wait().unwrap();
    let mut out = vec![0u8; 16];
    outs[0].to_host(&mut out).unwrap();
    let v: Vec<f32> = out.chunks(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
    assert_eq!(v, vec![11.0, 12.0, 13.0, 14.0]);
    let ser = exe.serialize().unwrap();
    println!("serialized {} bytes", ser.len());
    let exe2 = client.deserialize(&ser).unwrap();
    let (outs, ev) = exe2.execute(&[&x, &s], 1).unwrap();
    ev.wait().unwrap();
    outs[0].to_host(&mut out).unwrap();
    println!("mem {:?}", client.memory(1).live());
}

/// A long program PJRT refuses: the error shows its head and tail, and
/// (as the runtime's compile path does, `Error::saving_program`) the whole
/// program is saved to a file that the message names.
#[test]
fn a_long_failing_program_is_saved_and_named() {
    let found = discovery::find_plugin(None).unwrap();
    let client = Client::create(Api::load(&found.path).unwrap(), &[]).unwrap();
    let mut body = String::new();
    for i in 1..=80 {
        body += &format!("    %{i} = stablehlo.add %{}, %arg0 : tensor<4xf32>\n", i - 1);
    }
    // The last line returns the wrong type: a verifier error.
    let prog = format!(
        "module @m {{\n  func.func public @main(%arg0: tensor<4xf32>) -> tensor<4xi32> {{\n    %0 = stablehlo.add %arg0, %arg0 : tensor<4xf32>\n{body}    return %80 : tensor<4xf32>\n  }}\n}}"
    );
    let e = client.compile("long test program", &prog, &CompileOptions::Portable).err().expect("refused");
    let dir = std::env::temp_dir().join(format!("ttpu-smoke-failed-{}", std::process::id()));
    let e = e.saving_program(&dir);
    let torchtpu_core::Error::Compile { saved: Some(path), .. } = &e else { panic!("not a saved compile error: {e}") };
    assert_eq!(std::fs::read_to_string(path).unwrap(), prog);
    assert_eq!(path.parent().unwrap(), dir);
    let text = e.to_string();
    assert!(text.contains("compiling long test program failed"), "{text}");
    assert!(text.contains(&format!("lines left out; the whole program is in {}", path.display())), "{text}");
    assert!(!text.contains("%45 = "), "the middle is cut: {text}");
    std::fs::remove_dir_all(&dir).unwrap();
}
