"""Clients against a tierkv whose flash writes fail (`--flash-test-fail-writes-while SWITCH`):
fills 30,000 keys, creates SWITCH (writes fail), runs CLIENTS clients (gets, sets, deletes) for
SECONDS, removes SWITCH after HEAL seconds (0: never), and prints the requests answered, the
slowest, and any timeout (5 s), wrong value or bad reply, and how fast a new client is served.

    python3 scripts/flash_faults_load.py PORT SWITCH [CLIENTS [SECONDS [HEAL]]]

Start the server first, for instance:
    target/release/tierkv -p 23470 -m 4 -I 256k -t 2 -c 300 --flash-path /tmp/f.flash \
        --flash-size 64m --flash-test-fail-writes-while /tmp/f.switch
"""
import socket, time, random, os, threading, sys
PORT = int(sys.argv[1])
SWITCH = sys.argv[2]
CLIENTS = int(sys.argv[3]) if len(sys.argv) > 3 else 290
SECONDS = float(sys.argv[4]) if len(sys.argv) > 4 else 8
HEAL = float(sys.argv[5]) if len(sys.argv) > 5 else 0
def val(i): return (f"{i}."*200)[:150+i%100]
s=socket.create_connection(("127.0.0.1",PORT)); s.settimeout(10); f=s.makefile('rb')
buf=b""
for i in range(30000):
    v=val(i); buf+=f"set k{i} 0 0 {len(v)}\r\n{v}\r\n".encode()
    if i%250==249:
        s.sendall(buf); buf=b""
        for _ in range(250): f.readline()
s.close()
open(SWITCH,"w").close()
stats={"n":0,"max":0.0,"timeouts":0,"wrong":0,"errors":0,"refused":0}
lock=threading.Lock()
stop=time.time()+SECONDS
def client(c):
    try:
        s=socket.create_connection(("127.0.0.1",PORT)); s.settimeout(5); f=s.makefile('rb')
    except Exception as e:
        with lock: stats["refused"]+=1
        return
    r=random.Random(c)
    while time.time()<stop:
        k=r.randrange(30000); x=r.random(); t=time.time()
        try:
            if x<0.6:
                s.sendall(f"get k{k}\r\n".encode()); l=f.readline()
                if l.startswith(b"VALUE"):
                    v=f.readline().decode().rstrip("\r\n"); f.readline()
                    if v!=val(k):
                        with lock: stats["wrong"]+=1
                elif l!=b"END\r\n":
                    with lock: stats["errors"]+=1
            elif x<0.9:
                v=val(k); s.sendall(f"set n{c}-{k} 0 0 {len(v)}\r\n{v}\r\n".encode()); l=f.readline()
                if not (l==b"STORED\r\n" or l.startswith(b"SERVER_ERROR")):
                    with lock: stats["errors"]+=1
            else:
                s.sendall(f"delete k{k}\r\n".encode()); l=f.readline()
            d=time.time()-t
            with lock:
                stats["n"]+=1; stats["max"]=max(stats["max"],d)
        except socket.timeout:
            with lock: stats["timeouts"]+=1
            return
        time.sleep(0.005)
ts=[threading.Thread(target=client,args=(c,)) for c in range(CLIENTS)]
for t in ts: t.start()
time.sleep(min(3, SECONDS / 2))
t0=time.time(); n=socket.create_connection(("127.0.0.1",PORT)); n.settimeout(5); n.sendall(b"version\r\n"); n.recv(100); newc=time.time()-t0; n.close()
if HEAL > 0:
    time.sleep(max(0, HEAL - min(3, SECONDS / 2)))
    os.remove(SWITCH)
for t in ts: t.join()
print(f"requests {stats['n']}, max latency {stats['max']*1000:.0f} ms, timeouts {stats['timeouts']}, wrong {stats['wrong']}, bad replies {stats['errors']}, refused {stats['refused']}, new client version in {newc*1000:.1f} ms")
