import collections,sys
# actix-http's pooled request heads (MessagePool, `with_pool`): how many a run leaves in its
# pools moves between runs (300 streams held more than 1,000 in one run), so they are left out.
POOLED = 'with_pool<> actix_http::message::Message'

def load(path, depth):
    by=collections.Counter(); tot=0
    for line in open(path):
        stack,_,n=line.rstrip().rpartition(' '); n=int(n)
        if POOLED in stack:
            continue
        tot+=n
        fr=stack.split(';')
        if any('sqlite3' in f for f in fr):
            by['sqlite:'+('pcache' if any('pcache1' in f for f in fr) else 'other')]+=n; continue
        fr=[f for f in fr if not f.startswith(('alloc','__rust','_RNv','realloc','grow','allocate','exchange_malloc','new<>','with_capacity','try_allocate','finish_grow','reserve','do_reserve','from<>','from (','into<>','from_slice','box_new','new_uninit','try_new','copy_from_slice','{closure#0}<> (sync','from_iter','collect','fallible','do_alloc','prepare_resize','core::','std::'))]
        by[' < '.join(f[:40] for f in reversed(fr[-depth:]))]+=n
    return tot,by
a,b=sys.argv[1],sys.argv[2]; na,nb=int(sys.argv[3]),int(sys.argv[4]); depth=int(sys.argv[5])
ta,A=load(a,depth); tb,B=load(b,depth)
print(f"total per stream {(ta-tb)/(na-nb):.0f} B (actix-http's pooled request heads left out)")
keys=set(A)|set(B)
rows=sorted(((A[k]-B[k])/(na-nb),k) for k in keys)
for v,k in reversed(rows[-int(sys.argv[6]):]): print(f"{v:8.1f} {k}")
print('...negative:'); 
for v,k in rows[:5]: print(f"{v:8.1f} {k}")
