# Host CPU per legacy tools/list (the default packs: a 7,667-byte response), two builds alternated,
# 3 reps: a fresh host per rep (one worker, CPU 1), one session, 200 warm-up calls then 4,000
# sequential calls on one keep-alive connection; user and system CPU from /proc (clock ticks:
# 10 ms, so about 2.5 us a call of granularity). Loopback only; stops the host it starts.
#   python3 run.py BEFORE_BIN AFTER_BIN
import http.client, json, subprocess, sys, time, os, tempfile, socket
def run(binary, n=4000):
    d=tempfile.mkdtemp()
    s=socket.socket(); s.bind(('127.0.0.1',0)); port=s.getsockname()[1]; s.close()
    p=subprocess.Popen(['taskset','-c','1',binary,'--port',str(port),'--workers','1'],cwd=d,stdout=subprocess.DEVNULL,stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                c=http.client.HTTPConnection('127.0.0.1',port,timeout=5); c.request('GET','/'); c.getresponse().read(); break
            except Exception: time.sleep(0.1)
        h={'Content-Type':'application/json','Accept':'application/json'}
        c.request('POST','/mcp',json.dumps({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"b","version":"1"}}}),h)
        r=c.getresponse(); r.read(); sid=r.getheader('mcp-session-id')
        h.update({'Mcp-Session-Id':sid,'MCP-Protocol-Version':'2025-11-25'})
        body=json.dumps({"jsonrpc":"2.0","id":1,"method":"tools/list"})
        for _ in range(200): c.request('POST','/mcp',body,h); c.getresponse().read()
        st=open(f'/proc/{p.pid}/stat').read().split(); u0,s0=int(st[13]),int(st[14])
        size=0
        for _ in range(n):
            c.request('POST','/mcp',body,h); size=len(c.getresponse().read())
        st=open(f'/proc/{p.pid}/stat').read().split(); u1,s1=int(st[13]),int(st[14])
        tk=os.sysconf('SC_CLK_TCK')
        return (u1-u0)/tk/n*1e6, (s1-s0)/tk/n*1e6, size
    finally:
        p.kill(); p.wait(); subprocess.run(['rm','-rf',d])
for rep in range(3):
    for name,b in [('before',sys.argv[1]),('after',sys.argv[2])]:
        u,s,size=run(b)
        print(f"{name} user_us {u:.1f} sys_us {s:.1f} bytes {size}", flush=True)
