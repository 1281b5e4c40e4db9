import json, statistics as st, sys
def load(f): return json.load(open(f))
def windows(stamps, w=1.0):
    out={}
    for t,d in stamps: out.setdefault(int(t//w),[]).append(d)
    return {k:st.median(v) for k,v in out.items() if len(v)>=5}
for name in ("alone0","alone1"):
    s=load(name+".json"); print(name, "steps",len(s),"median ms", round(st.median(d for _,d in s)*1e3,2))
a,b=load("both0.json"),load("both1.json")
print("both0 median", round(st.median(d for _,d in a)*1e3,2), "both1 median", round(st.median(d for _,d in b)*1e3,2))
wa,wb=windows(a),windows(b)
common=sorted(set(wa)&set(wb))
mx=[max(wa[k],wb[k]) for k in common]; mn=[(wa[k]+wb[k])/2 for k in common]
print("1-s windows", len(common), "mean of per-window max", round(st.mean(mx)*1e3,2), "mean of per-window mean", round(st.mean(mn)*1e3,2), "ratio", round(st.mean(mx)/st.mean(mn),3))
r=[wa[k]/wb[k] for k in common]
print("cpu0/cpu1 per window: median", round(st.median(r),3), "deciles", [round(x,2) for x in st.quantiles(r,n=10)])
print("trace (cpu0 ms, cpu1 ms) every 5 s:", [(round(wa[k]*1e3,1), round(wb[k]*1e3,1)) for k in common[::5]])
