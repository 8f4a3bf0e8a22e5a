//! Virtual devices (`makeVDevice`, ncclNet v9+), as NCCL 2.30.7's NIC fusion uses them
//! (`src/graph/topo.cc` `ncclTopoMakeVnic`, `ncclTopoProcessNet`).

use crate::cx::Cx;
use crate::outcome::Res;
use crate::registry::Registry;
use crate::watch::Call;
use crate::{ensure, fail};

pub(crate) fn register(r: &mut Registry) {
    r.add(
        "vdev.make",
        "§1.2",
        "makeVDevice of devices 0 and 1 (device 0 alone on a one-device plugin) returns a new index (devices() grows by one and the index is the last), getProperties of it is valid with vProps listing exactly the members, and a connection on it moves data",
        make,
    )
    .since(9)
    .nccl("src/graph/topo.cc ncclTopoProcessNet: virtual devices are numbered after the physical ones (nVirtualNics = devices() - nPhysicalNics) and each is populated from getProperties(d).vProps; ncclTopoUpdateVNics removes the members");
}

fn make(cx: &mut Cx, _: u64) -> Res {
    let n0 = cx.call(Call::Devices, "devices() before makeVDevice", |n| n.devices())?;
    if !cx.net.has_make_vdevice() {
        return Err(crate::skip!(
            "the plugin's makeVDevice slot is NULL (NCCL then uses the physical devices only)"
        ));
    }
    let members: Vec<i32> = if n0 >= 2 { vec![0, 1] } else { vec![0] };
    if n0 < 2 {
        cx.notes
            .push("one device only: fused device 0 alone (NCCL fuses two or more)".into());
    }
    // A plugin may refuse to fuse (NCCL 2.30.7 topo.cc logs the failed makeVDevice and
    // keeps the devices unfused), so a refusal is a skip with its reason, not a defect.
    let d = match cx.call(Call::MakeVDevice, &format!("makeVDevice({members:?})"), |n| {
        n.make_vdevice(&members)
    }) {
        Ok(d) => d,
        Err(crate::outcome::Stop::Fail { observed, .. }) if observed.contains("makeVDevice returned an error") => {
            return Err(crate::skip!(
                "the plugin refuses to fuse {members:?} (NCCL then keeps the devices unfused): {observed}"
            ));
        }
        Err(e) => return Err(e),
    };
    let n1 = cx.call(Call::Devices, "devices() after makeVDevice", |n| n.devices())?;
    ensure!(
        n1 == n0 + 1,
        "devices() counts the new virtual device (NCCL: nVirtualNics = devices() - nPhysicalNics)",
        "devices() was {n0} before makeVDevice and {n1} after"
    );
    ensure!(
        d == n0,
        format!("makeVDevice returns the new device's index, {n0} (after the {n0} existing devices)"),
        "makeVDevice({members:?}) returned index {d}{}",
        if d < n0 { " (an existing device)" } else { "" }
    );
    let p = cx.call(
        Call::GetProperties,
        &format!("getProperties({d}) of the virtual device"),
        |n| n.properties(d),
    )?;
    ensure!(
        !p.name.is_empty() && p.speed > 0,
        "the virtual device has a name and a speed > 0",
        "getProperties({d}): name {:?}, speed {}",
        p.name,
        p.speed
    );
    let (mut got, mut want) = (p.vdevs.clone(), members.clone());
    got.sort_unstable();
    want.sort_unstable();
    ensure!(
        got == want,
        format!("vProps of the virtual device lists its members {members:?} (NCCL removes them from the topology)"),
        "getProperties({d}).vProps lists {:?}",
        p.vdevs
    );
    // A connection on the virtual device, as NCCL's channels use it.
    let dev = std::mem::replace(&mut cx.dev, d);
    let r = (|| {
        let pair = cx.pair()?;
        for (len, seed) in [(64usize, 71u64), (1 << 20, 72)] {
            let got = cx.roundtrip(&pair, len, len, seed)?;
            if got != len {
                return Err(fail!(
                    "a message on the virtual device arrives whole",
                    "received {got} bytes of {len}"
                ));
            }
        }
        cx.close_pair(pair)
    })();
    cx.dev = dev;
    r
}
