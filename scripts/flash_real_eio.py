"""A real device error under tierkv: the flash file lives on ext4 on a loop device whose backing
file sits on a 48 MiB tmpfs, so once the tmpfs is full the loop device answers writes with EIO
(through io_uring or the thread pool: PORT, FLASH_PATH, uring|threads). Fills 120,000 keys of
1,000 bytes (-m 8, a 96 MiB flash file), reads them all back, times a new client's `version`
and SIGTERM. Needs root (mount, losetup); set it up first:

    mkdir -p /tmp/eio/small /tmp/eio/mnt && mount -t tmpfs -o size=48M tmpfs /tmp/eio/small
    truncate -s 128M /tmp/eio/small/backing && L=$(losetup -f --show /tmp/eio/small/backing)
    mkfs.ext4 -q $L && mount $L /tmp/eio/mnt
    python3 scripts/flash_real_eio.py 23993 /tmp/eio/mnt/f.flash uring
    umount /tmp/eio/mnt; losetup -d $L; umount /tmp/eio/small
"""
import socket, time, subprocess, sys, os, threading
port=int(sys.argv[1]); path=sys.argv[2]; io=sys.argv[3]; FLASH_LOG="/tmp/tierkv-eio-%d.log" % port
p=subprocess.Popen(["target/release/tierkv","-p",str(port),"-t","2","-m","8","-c","300","--flash-path",path,"--flash-size","96m","--flash-io",io],stderr=open(FLASH_LOG,"w"))
time.sleep(0.7)
def stats():
    s=socket.create_connection(("127.0.0.1",port)); f=s.makefile('rb'); s.sendall(b"stats\r\n"); d={}
    while (l:=f.readline())!=b"END\r\n":
        a=l.decode().split(); d[a[1]]=a[2]
    s.close(); return d
s=socket.create_connection(("127.0.0.1",port)); s.settimeout(10); f=s.makefile('rb')
errs={}; v=b"x"*1000; worst=0; t0=time.time(); n=0
for lo in range(0,120000,200):
    t=time.time()
    s.sendall(b"".join(b"set k%d 0 0 %d\r\n%s\r\n"%(i,len(v),v) for i in range(lo,lo+200)))
    for _ in range(200):
        l=f.readline(); n+=1
        if l!=b"STORED\r\n": errs[l]=errs.get(l,0)+1
    worst=max(worst,time.time()-t)
print("other replies", errs); print(f"filled 120000 x 1000 B in {time.time()-t0:.1f}s, slowest batch {worst:.2f}s")
st=stats(); print({k:st[k] for k in ["flash_write_errors","flash_segments_given_up","flash_degraded_partitions","flash_rejected_degraded","flash_read_timeouts"]})
# gets of everything: answered, right value or miss
worst=0; hit=0; miss=0; wrong=0
for lo in range(0,120000,100):
    t=time.time(); s.sendall(b"get "+b" ".join(b"k%d"%i for i in range(lo,lo+100))+b"\r\n")
    while (l:=f.readline())!=b"END\r\n":
        d=f.readline()[:-2]; hit+=1; wrong+= d!=v
    worst=max(worst,time.time()-t)
print(f"gets: {hit} hits, {wrong} wrong, slowest batch {worst:.2f}s")
c=socket.create_connection(("127.0.0.1",port)); t=time.time(); c.sendall(b"version\r\n"); c.recv(100); print(f"new client version {1000*(time.time()-t):.1f} ms")
p.terminate(); t=time.time(); p.wait(timeout=30); print(f"SIGTERM exit {time.time()-t:.2f}s rc {p.returncode}")
print(open(FLASH_LOG).read())
