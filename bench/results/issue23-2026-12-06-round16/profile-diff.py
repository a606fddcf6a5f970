import sys,collections,re
def load(path, reqs, secs=10):
    incl=collections.Counter(); self_=collections.Counter(); tot=0
    for line in open(path):
        stack,_,n=line.rstrip().rpartition(' '); n=int(n); tot+=n
        fr=stack.split(';')
        seen=set()
        for f in fr:
            f=re.sub(r'::\{\{closure\}\}','',f); f=re.sub(r'<[^<>]*>','',f) if len(f)>200 else f
            if f not in seen: incl[f]+=n; seen.add(f)
        self_[fr[-1]]+=n
    ns=secs*1e9/reqs/tot
    return {k:v*ns for k,v in incl.items()}, {k:v*ns for k,v in self_.items()}
a,ra,b,rb=sys.argv[1],int(sys.argv[2]),sys.argv[3],int(sys.argv[4])
A,As=load(a,ra); B,Bs=load(b,rb)
mode=sys.argv[5] if len(sys.argv)>5 else 'incl'
X,Y=(A,B) if mode=='incl' else (As,Bs)
rows=sorted(((X.get(k,0)-Y.get(k,0)),k) for k in set(X)|set(Y))
for d,k in reversed(rows[-int(sys.argv[6]) if len(sys.argv)>6 else -40:]): print(f"{d:8.0f} ns  {X.get(k,0):7.0f} vs {Y.get(k,0):7.0f}  {k[:150]}")
